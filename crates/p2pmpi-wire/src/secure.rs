//! Authenticated, encrypted control connections between grid daemons and commands.
//!
//! Every control connection of the grid (peer ↔ supernode, peer ↔ peer, submitter ↔ peer)
//! starts with a [Noise](https://noiseprotocol.org) handshake, pattern
//! `Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`, keyed by the **grid secret** (`GRID_SECRET` in the
//! configuration). The pre-shared key enters the very first handshake message, so a side that
//! does not know the secret cannot produce or read anything: the responder drops the
//! connection on the first message, the initiator on the answer. After the handshake every
//! record is encrypted and authenticated, so nobody on the path can inject a reservation or a
//! launch into an established connection either.
//!
//! We use the `snow` crate (the reference Rust Noise implementation, used by libp2p and
//! others) rather than inventing a challenge-response: the handshake, its key schedule and
//! its nonce handling are the delicate part, and snow's are reviewed and fuzzed.
//!
//! Framing: a Noise message is at most 65 535 bytes, so a record (a postcard-encoded serde
//! value) is cut into chunks. On the wire each chunk is a 2-byte big-endian length followed by
//! that many bytes of ciphertext; the first chunk's plaintext starts with the record's total
//! length (4 bytes, little-endian), checked against the connection's limit before anything is
//! allocated. Malformed, oversized or forged input is an error, never a panic. A record's reads
//! honour the read time-out and one deadline for the whole record (below), so a connection
//! that stalls or trickles ends with an error the caller logs.
//!
//! The handshake has **one deadline** for all of it (TCP connection, every read and write),
//! not a time-out per read: a side that trickles one byte every few seconds cannot make it
//! last longer. A [`Canceller`] lets another thread close a connection in any phase, the
//! handshake included (a watchdog that found the other side frozen).
//!
//! ## When the responder counts a connection as authenticated
//!
//! The initiator's first handshake message (`e, psk`) depends on nothing the responder sent:
//! whoever recorded one (a peer's keep-alive sends one every second) can replay it, and the
//! responder accepts it and answers. The replayer cannot go further, since it lacks the
//! ephemeral key it would need to read the answer, but with a plain `NNpsk0` responder that
//! connection would already count as authenticated. We keep `psk0` (a connection without the
//! secret is still dropped on its very first message, before the responder computes
//! anything else) and a server counts a connection as authenticated only once its client's
//! **first transport record** was decrypted ([`SecureConn::accept_proven`], or
//! [`SecureConn::accept`] then [`SecureConn::await_proof`]): that record is encrypted under
//! keys mixed from the `ee` Diffie-Hellman with the responder's fresh ephemeral key, so only a
//! side that holds the secret *and* took part in this very handshake can produce it; a replay
//! of an earlier one does not decrypt. It is due within the handshake's deadline (every client
//! speaks first: a request), and is kept for the first [`SecureConn::recv`]. Switching to
//! `NNpsk2` would prove nothing more — the responder would still wait for a first transport
//! message to learn whether the initiator holds the key — and would let anyone without the
//! secret make the responder do its Diffie-Hellman.
//!
//! ## Member mode: a key per member
//!
//! In member mode ([`GridSecret::member`]) each side has its own key pair and a certificate
//! signed by the grid's owner ([`crate::identity`]). We keep the `NNpsk0` handshake above
//! (its pre-shared key is then derived from the owner's public key: it only keeps other
//! grids and strangers out before any Diffie-Hellman) and authenticate the members
//! **inside** it: right after the handshake each side sends, as its first record, a *hello*
//! holding its certificate and its Ed25519 signature over the Noise **handshake hash** and
//! its role (initiator or responder). The other side checks the certificate (signed by the
//! owner, valid now, not revoked) and the signature with the certificate's key. The hash
//! covers both fresh ephemeral keys, so a hello is good for this one connection: a replayed
//! handshake or hello, or a certificate copied without its private key, is refused; the role
//! byte keeps a side from reflecting the other's hello. The initiator checks the responder's
//! hello before [`SecureConn::connect`] returns. The responder sends its own with its last
//! handshake message and checks the client's as the client's **first record**: in
//! [`SecureConn::await_proof`] (the hello, checked, is the proof; no record is kept) or, for
//! a server that does not await it, before its first receive. So a server still counts a
//! connection as authenticated only after the client's first record decrypted (and here was
//! verified), and while it waits for it the connection is still one waiting on its client
//! (a daemon can push it out to make room). A server must receive before it sends anything
//! but its hello. [`SecureConn::peer_member`] gives the checked certificate, from which a
//! daemon takes the member's name and roles.
//!
//! Why not `XXpsk3` or `IKpsk2` with the certificate in the handshake payload: they would
//! need X25519 static keys beside the Ed25519 signing keys (or converting between the two),
//! and a second handshake code path beside the transition mode's. Signing the handshake hash
//! keeps one handshake, one key per member, and the same first-record property.
//!
//! The **transition mode** ([`GridSecret::from_phrase`]: `GRID_SECRET`, no member keys) is
//! the plain `NNpsk0` above, replay-resistant by the first-record proof. Both sides of a
//! connection must be in the same mode (their pre-shared keys differ).
//!
//! ## One deadline per record
//!
//! After the handshake, the read time-out ([`SecureConn::set_read_timeout`]) bounds the wait
//! for a record's first byte; from that byte on, the **whole record** must arrive within
//! [`SecureReader::record_time`] ([`RECORD_TIMEOUT`] plus its largest size at
//! [`RECORD_MIN_RATE`]), each read also within the read time-out. A side that announces a
//! long record and trickles a byte now and then is dropped at that deadline.
//!
//! A record is the whole message: bytes left after the decoded value make it malformed.
//!
//! ## A refused member is told why
//!
//! A server that refuses a client's certificate although the client proved its key (its hello
//! signed this handshake with the key of a certificate the grid's owner signed: the
//! certificate expired, is not valid yet, or its member is revoked) sends it one **refusal
//! record** before it closes: the record's length field [`REFUSAL`], then the reason in words
//! (at most [`MAX_REFUSAL`] bytes). The client's next receive fails with
//! [`SecureError::RefusedBy`], holding the reason. Anyone else (no key of the grid, a forged
//! or foreign certificate, a signature that does not prove the key) is closed without a word,
//! as before: only an authenticated member learns why.

use crate::identity::{CertError, Certificate, KeyPair, PublicKey, Revocations};
use serde::{de::DeserializeOwned, Serialize};
use snow::StatelessTransportState;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const MAX_NOISE: usize = 65535;
const TAG: usize = 16;
/// Plaintext bytes carried by one Noise message.
const CHUNK: usize = MAX_NOISE - TAG;
/// Records larger than this are refused unless a connection raises its own limit.
pub const DEFAULT_MAX_RECORD: usize = 4 << 20;
/// Default time allowed for the whole handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a record has from its first byte to its last, beyond what its size needs at
/// [`RECORD_MIN_RATE`].
pub const RECORD_TIMEOUT: Duration = Duration::from_secs(10);
/// Slowest transfer rate a record's deadline allows for, bytes per second.
pub const RECORD_MIN_RATE: u64 = 1 << 20;

/// A stream whose every read and write is bounded by what is left of one deadline: a peer
/// that sends (or reads) a byte now and then cannot stretch an exchange past it. Each call
/// sets the socket's time-out to the time left; once it passed, calls fail with `TimedOut`.
pub struct Bounded<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl<'a> Bounded<'a> {
    pub fn new(stream: &'a TcpStream, deadline: Instant) -> Self {
        Bounded { stream, deadline }
    }

    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        Ok(left)
    }
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.stream).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Closes a connection from another thread, in any phase (TCP connection excepted: it is
/// bounded by its own time-out): whatever blocks on it returns an error at once. For a
/// watchdog that gave up on the other side.
#[derive(Clone, Default)]
pub struct Canceller(Arc<Mutex<CancelState>>);

#[derive(Default)]
struct CancelState {
    cancelled: bool,
    stream: Option<TcpStream>,
}

impl Canceller {
    pub fn new() -> Self {
        Self::default()
    }

    /// Closes the connection (now, or as soon as it is attached).
    pub fn cancel(&self) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        st.cancelled = true;
        if let Some(s) = st.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).cancelled
    }

    /// Attaches a connection: `cancel` closes it from now on (at once if it was called).
    pub fn attach(&self, stream: &TcpStream) -> io::Result<()> {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if st.cancelled {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "cancelled"));
        }
        st.stream = Some(stream.try_clone()?);
        Ok(())
    }
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Canceller(cancelled: {})", self.is_cancelled())
    }
}

/// The credentials of a side of the grid's handshakes: in **member mode** its member key,
/// certificate and the grid's owner key ([`GridSecret::member`]); in the **transition mode**
/// the grid secret alone ([`GridSecret::from_phrase`]). Either way it gives the handshake's
/// 32-byte pre-shared key.
#[derive(Clone)]
pub struct GridSecret {
    psk: [u8; 32],
    member: Option<Arc<Member>>,
}

/// A member's credentials: its key pair, its certificate, the grid's owner key that checks
/// the other side's certificate, and the revoked members. The certificate (renewed) and the
/// revocations (learnt from the supernodes) change while a daemon runs: every clone of the
/// [`GridSecret`] sees the change at its next handshake.
pub struct Member {
    pub key: KeyPair,
    cert: std::sync::RwLock<Certificate>,
    pub owner: PublicKey,
    pub revoked: std::sync::RwLock<Revocations>,
}

impl Member {
    /// This side's certificate now.
    pub fn cert(&self) -> Certificate {
        self.cert.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the certificate (its renewal: same key, checked by the caller).
    pub fn set_cert(&self, cert: Certificate) {
        *self.cert.write().unwrap_or_else(|p| p.into_inner()) = cert;
    }

    /// Replaces the revoked members.
    pub fn set_revoked(&self, r: Revocations) {
        *self.revoked.write().unwrap_or_else(|p| p.into_inner()) = r;
    }
}

impl GridSecret {
    /// Transition mode: derives the key from the configured secret phrase (any length, any
    /// bytes).
    pub fn from_phrase(phrase: &str) -> Self {
        GridSecret { psk: blake3::derive_key("p2pmpi grid secret v1", phrase.as_bytes()), member: None }
    }

    /// Member mode: the pre-shared key comes from the grid's owner key (it only keeps other
    /// grids' and strangers' connections out before any Diffie-Hellman); each side then
    /// proves its certificate's key (see the module doc).
    pub fn member(key: KeyPair, cert: Certificate, owner: PublicKey) -> Self {
        let member = Member { key, cert: std::sync::RwLock::new(cert), owner, revoked: Default::default() };
        GridSecret { psk: blake3::derive_key("p2pmpi member grid v1", &owner.0), member: Some(Arc::new(member)) }
    }

    /// A one-time key (an invitation's token): the pre-shared key alone, no member.
    pub fn one_time(token: &[u8]) -> Self {
        GridSecret { psk: blake3::derive_key("p2pmpi invitation v1", token), member: None }
    }

    /// The key of a keyed connection ([`SecureConn::connect_keyed`]): its handshake's
    /// pre-shared key is derived from `key`, a secret of one job, not of the grid.
    pub fn keyed(key: &[u8; 32]) -> Self {
        GridSecret { psk: blake3::derive_key("p2pmpi keyed connection v1", key), member: None }
    }

    /// This side's member credentials (`None` in the transition mode).
    pub fn member_info(&self) -> Option<&Member> {
        self.member.as_deref()
    }
}

impl std::fmt::Debug for GridSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.member {
            Some(m) => write!(f, "GridSecret(member {})", m.cert().body.name),
            None => f.write_str("GridSecret(…)"),
        }
    }
}

/// What each side of a member-mode handshake sends first: its certificate and its signature
/// over the handshake hash.
#[derive(Serialize, serde::Deserialize)]
struct Hello {
    cert: Certificate,
    sig: Vec<u8>,
}

/// Largest hello accepted.
const MAX_HELLO: usize = 4096;

fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Errors of a secure connection.
#[derive(Debug, Error)]
pub enum SecureError {
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("handshake failed (wrong or missing grid secret?): {0}")]
    Handshake(String),
    #[error("record of {0} bytes exceeds the limit of {1}")]
    TooLong(usize, usize),
    #[error("record could not be decrypted or authenticated")]
    Forged,
    #[error("malformed record: {0}")]
    Malformed(String),
    #[error("connection timed out")]
    TimedOut,
    #[error("member refused: {0}")]
    Refused(#[from] CertError),
    /// The other side refused this side's certificate and said why (a refusal record).
    #[error("refuses this member: {0}")]
    RefusedBy(String),
}

/// The length field of a refusal record (no record is this long).
pub const REFUSAL: u32 = u32::MAX;
/// The longest reason a refusal record carries.
pub const MAX_REFUSAL: usize = 512;

impl SecureError {
    /// True when the failure is a time-out (a stalled peer).
    pub fn is_timeout(&self) -> bool {
        match self {
            SecureError::TimedOut => true,
            SecureError::Io(e) => matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            _ => false,
        }
    }
}

fn io_err(e: io::Error) -> SecureError {
    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
        SecureError::TimedOut
    } else {
        SecureError::Io(e)
    }
}

fn write_frame(w: &mut impl Write, data: &[u8]) -> Result<(), SecureError> {
    debug_assert!(data.len() <= MAX_NOISE);
    let mut buf = Vec::with_capacity(2 + data.len());
    buf.extend_from_slice(&(data.len() as u16).to_be_bytes());
    buf.extend_from_slice(data);
    w.write_all(&buf).map_err(io_err)
}

/// Reads one frame; `Ok(None)` on a clean end of stream before its first byte.
fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<Option<usize>, SecureError> {
    let mut len = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(SecureError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    let n = u16::from_be_bytes(len) as usize;
    buf.resize(n, 0);
    r.read_exact(&mut buf[..n]).map_err(io_err)?;
    Ok(Some(n))
}

/// Opens a TCP connection, bound to `local` first when given.
pub fn connect_tcp(local: Option<std::net::IpAddr>, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let Some(ip) = local.filter(|ip| !ip.is_unspecified()) else {
        return TcpStream::connect_timeout(&addr, timeout);
    };
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(ip, 0).into())?;
    sock.connect_timeout(&addr.into(), timeout)?;
    Ok(sock.into())
}

/// The first byte of a keyed connection ([`SecureConn::connect_keyed`]); the next is the
/// length of the label that follows.
pub const KEYED: u8 = b'K';
/// Longest label of a keyed connection.
pub const MAX_LABEL: usize = 200;

fn builder(secret: &GridSecret) -> Result<snow::Builder<'_>, SecureError> {
    let params = NOISE_PARAMS.parse().map_err(|e| SecureError::Handshake(format!("{e:?}")))?;
    snow::Builder::new(params).psk(0, &secret.psk).map_err(|e| SecureError::Handshake(format!("{e:?}")))
}

/// The sending half of a connection.
pub struct SecureWriter {
    stream: TcpStream,
    noise: Arc<Mutex<StatelessTransportState>>,
    nonce: u64,
    out: Vec<u8>,
}

/// The receiving half of a connection.
pub struct SecureReader {
    stream: TcpStream,
    records: RecordReader,
    /// Time a record has from its first byte to its last (`None`: from its limit).
    record_time: Option<Duration>,
}

/// The record layer of one receiving direction: reads frames from a byte stream, decrypts
/// and authenticates them in order (the nonce counts them), reassembles the chunks of a record,
/// bounds its length and decodes it. Kept apart from the socket so that the same code also
/// runs over an in-memory stream (the `secure_records` fuzz target).
pub struct RecordReader {
    noise: Arc<Mutex<StatelessTransportState>>,
    nonce: u64,
    max_record: usize,
    frame: Vec<u8>,
    plain: Vec<u8>,
    /// `plain` holds a whole record read ahead (the proof of the key), not decoded yet.
    ready: bool,
    /// Member mode: the other side's hello, still to be read and checked before any record.
    hello: Option<HelloCheck>,
    /// Member mode: the other side's certificate, once checked.
    peer: Option<Certificate>,
    /// The other side's hello was refused: nothing more is read.
    refused: bool,
    /// Why the other side's certificate was refused, when it proved its key (a member): to
    /// be sent to it ([`SecureConn::await_proof`]).
    tell: Option<String>,
}

/// What checks the other side's hello.
struct HelloCheck {
    member: Arc<Member>,
    hash: Vec<u8>,
    /// The hello is the initiator's.
    signer_initiator: bool,
}

/// An authenticated, encrypted connection carrying serde records.
pub struct SecureConn {
    pub reader: SecureReader,
    pub writer: SecureWriter,
}

impl SecureConn {
    /// Connects to `addr` and runs the handshake as initiator, all within `timeout` (one
    /// deadline for the TCP connection and the whole handshake).
    pub fn connect(addr: SocketAddr, secret: &GridSecret, timeout: Duration) -> Result<Self, SecureError> {
        Self::connect_from(None, addr, secret, timeout)
    }

    /// Like [`SecureConn::connect`], from a chosen local address: a peer speaks from its own
    /// advertised IP, so that the other side's HOST_DENY / HOST_ALLOW sees the right address
    /// (several peers of a local grid share one machine, each on its own loopback address).
    pub fn connect_from(
        local: Option<std::net::IpAddr>,
        addr: SocketAddr,
        secret: &GridSecret,
        timeout: Duration,
    ) -> Result<Self, SecureError> {
        let deadline = Instant::now() + timeout;
        let stream = connect_tcp(local, addr, timeout).map_err(io_err)?;
        Self::handshake(stream, secret, deadline, true)
    }

    /// Like [`SecureConn::connect_from`], closed by `cancel` whenever it is called, also
    /// during the handshake.
    pub fn connect_cancellable(
        local: Option<std::net::IpAddr>,
        addr: SocketAddr,
        secret: &GridSecret,
        timeout: Duration,
        cancel: &Canceller,
    ) -> Result<Self, SecureError> {
        let deadline = Instant::now() + timeout;
        let stream = connect_tcp(local, addr, timeout).map_err(io_err)?;
        cancel.attach(&stream)?;
        Self::handshake(stream, secret, deadline, true)
    }

    /// A **keyed connection**: opens with a label in clear (`KEYED`, the label's length, the
    /// label), then the handshake keyed by `key` ([`GridSecret::keyed`]) instead of the grid's.
    /// A job's processes, which do not hold the grid secret, reach a service this way with a
    /// key of their job's (the label names it; the key never travels). A grid handshake's
    /// first byte is 0 (its first frame is short), so a server tells both apart on one port
    /// ([`SecureConn::accept_keyed`]).
    pub fn connect_keyed(
        local: Option<std::net::IpAddr>,
        addr: SocketAddr,
        label: &str,
        key: &GridSecret,
        timeout: Duration,
    ) -> Result<Self, SecureError> {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err(SecureError::Malformed(format!("a label of {} bytes", label.len())));
        }
        let deadline = Instant::now() + timeout;
        let stream = connect_tcp(local, addr, timeout).map_err(io_err)?;
        let mut opening = vec![KEYED, label.len() as u8];
        opening.extend_from_slice(label.as_bytes());
        Bounded::new(&stream, deadline).write_all(&opening).map_err(io_err)?;
        Self::handshake(stream, key, deadline, true)
    }

    /// Runs the responder's handshake of a grid connection (with `secret`) or of a keyed one
    /// (with the key `lookup` gives for its label; an unknown label is refused), all within
    /// `timeout`; returns the keyed connection's label. Not proven yet, as with
    /// [`SecureConn::accept`].
    pub fn accept_keyed(
        stream: TcpStream,
        secret: &GridSecret,
        lookup: &dyn Fn(&str) -> Option<GridSecret>,
        timeout: Duration,
    ) -> Result<(Self, Option<String>), SecureError> {
        let deadline = Instant::now() + timeout;
        let mut first = [0u8; 1];
        stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        if stream.peek(&mut first).map_err(io_err)? == 0 || first[0] != KEYED {
            return Self::handshake(stream, secret, deadline, false).map(|c| (c, None));
        }
        let mut io = Bounded::new(&stream, deadline);
        let mut head = [0u8; 2];
        io.read_exact(&mut head).map_err(io_err)?;
        let mut label = vec![0u8; head[1] as usize];
        io.read_exact(&mut label).map_err(io_err)?;
        let label = String::from_utf8(label).map_err(|_| SecureError::Malformed("a label not in UTF-8".into()))?;
        let key = lookup(&label).ok_or_else(|| SecureError::Handshake(format!("no key for label {label:?}")))?;
        Self::handshake(stream, &key, deadline, false).map(|c| (c, Some(label)))
    }

    /// Runs the handshake as responder on an accepted connection, all of it within `timeout`.
    /// The connection is not proven yet (see the module doc): a server calls
    /// [`SecureConn::await_proof`] before it counts it as authenticated, or uses
    /// [`SecureConn::accept_proven`].
    pub fn accept(stream: TcpStream, secret: &GridSecret, timeout: Duration) -> Result<Self, SecureError> {
        Self::handshake(stream, secret, Instant::now() + timeout, false)
    }

    /// Runs the handshake as responder and waits for the client's first record, which proves
    /// that the client holds the secret and took part in this handshake (not a replay), all
    /// within `timeout`. The record is kept for the first [`SecureConn::recv`].
    pub fn accept_proven(stream: TcpStream, secret: &GridSecret, timeout: Duration) -> Result<Self, SecureError> {
        let deadline = Instant::now() + timeout;
        let mut c = Self::handshake(stream, secret, deadline, false)?;
        c.await_proof(deadline)?;
        Ok(c)
    }

    /// Reads the client's first record, whole, by `deadline`, and keeps it for the next
    /// [`SecureConn::recv`]: a record that decrypts proves the key (see the module doc). In
    /// member mode that record is the client's hello, checked here and not kept. A connection
    /// closed before it, or whose record does not decrypt or check, is an error.
    pub fn await_proof(&mut self, deadline: Instant) -> Result<(), SecureError> {
        let r = &mut self.reader;
        let idle = r.stream.read_timeout()?;
        let mut io = Bounded::new(&r.stream, deadline);
        // Member mode: the client's hello, checked, is the proof.
        let got = if r.records.hello.is_some() {
            r.records.check_hello(&mut io).map(|()| None)
        } else {
            r.records.read_record(&mut io).map(Some)
        };
        let _ = r.stream.set_read_timeout(idle);
        if let Some(why) = r.records.tell.take() {
            self.writer.refuse(&why, deadline);
        }
        match got {
            Ok(None) => Ok(()),
            Ok(Some(true)) => {
                r.records.ready = true;
                Ok(())
            }
            Ok(Some(false)) => Err(SecureError::Handshake("closed before its first record".into())),
            Err(e) => Err(e),
        }
    }

    fn handshake(
        stream: TcpStream,
        secret: &GridSecret,
        deadline: Instant,
        initiator: bool,
    ) -> Result<Self, SecureError> {
        stream.set_nodelay(true)?;
        let mut io = Bounded::new(&stream, deadline);
        let b = builder(secret)?;
        let mut hs = if initiator { b.build_initiator() } else { b.build_responder() }
            .map_err(|e| SecureError::Handshake(format!("{e:?}")))?;
        let mut msg = vec![0u8; MAX_NOISE];
        let mut payload = vec![0u8; MAX_NOISE];
        let mut frame = Vec::new();
        let hs_err = |e: snow::Error| SecureError::Handshake(format!("{e}"));
        // NN: initiator → e, psk; responder → e, ee.
        if initiator {
            let n = hs.write_message(&[], &mut msg).map_err(hs_err)?;
            write_frame(&mut io, &msg[..n])?;
            let Some(n) = read_frame(&mut io, &mut frame)? else {
                return Err(SecureError::Handshake("the other side closed the connection".into()));
            };
            hs.read_message(&frame[..n], &mut payload).map_err(hs_err)?;
        } else {
            let Some(n) = read_frame(&mut io, &mut frame)? else {
                return Err(SecureError::Handshake("the other side closed the connection".into()));
            };
            hs.read_message(&frame[..n], &mut payload).map_err(hs_err)?;
            let n = hs.write_message(&[], &mut msg).map_err(hs_err)?;
            write_frame(&mut io, &msg[..n])?;
        }
        let hash = hs.get_handshake_hash().to_vec();
        let noise = Arc::new(Mutex::new(hs.into_stateless_transport_mode().map_err(hs_err)?));
        let rstream = stream.try_clone()?;
        let mut conn = SecureConn {
            reader: SecureReader { stream: rstream, records: RecordReader::new(noise.clone()), record_time: None },
            writer: SecureWriter { stream, noise, nonce: 0, out: vec![0u8; MAX_NOISE] },
        };
        if let Some(m) = &secret.member {
            conn.exchange_hellos(m, hash, initiator, deadline)?;
        }
        conn.reader.stream.set_read_timeout(None)?;
        conn.writer.stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        Ok(conn)
    }

    /// Member mode: sends this side's certificate and signature over the handshake hash by
    /// `deadline`. The initiator then reads and checks the responder's at once; a responder
    /// checks the client's as its proof ([`SecureConn::await_proof`], or the first receive),
    /// so that while it waits for it the connection is still one waiting on its client.
    fn exchange_hellos(
        &mut self,
        m: &Arc<Member>,
        hash: Vec<u8>,
        initiator: bool,
        deadline: Instant,
    ) -> Result<(), SecureError> {
        let hello = Hello { cert: m.cert(), sig: m.key.sign_hello(initiator, &hash) };
        let body = postcard::to_allocvec(&hello).map_err(|e| SecureError::Malformed(e.to_string()))?;
        let wire = self.writer.seal(&body)?;
        Bounded::new(&self.writer.stream, deadline).write_all(&wire).map_err(io_err)?;
        self.reader.records.hello = Some(HelloCheck { member: m.clone(), hash, signer_initiator: !initiator });
        if initiator {
            self.reader.records.check_hello(&mut Bounded::new(&self.reader.stream, deadline))?;
        }
        Ok(())
    }

    /// The other side's certificate, checked (member mode; `None` in the transition mode, and
    /// on a server before the client's proof).
    pub fn peer_member(&self) -> Option<&Certificate> {
        self.reader.records.peer.as_ref()
    }

    /// Sends one record.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), SecureError> {
        self.writer.send(msg)
    }

    /// Receives one record; `Ok(None)` when the other side closed the connection cleanly.
    /// (A server that refuses the client's certificate here tells it why, as
    /// [`SecureConn::await_proof`] does.)
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, SecureError> {
        let got = self.reader.recv();
        if let Some(why) = self.reader.records.tell.take() {
            self.writer.refuse(&why, Instant::now() + HANDSHAKE_TIMEOUT);
        }
        got
    }

    /// Sends a request and waits for its answer (a closed connection is an error).
    pub fn call<Q: Serialize, A: DeserializeOwned>(&mut self, req: &Q) -> Result<A, SecureError> {
        self.send(req)?;
        self.recv()?.ok_or_else(|| SecureError::Io(io::ErrorKind::UnexpectedEof.into()))
    }

    /// Read time-out for the next receives (`None`: wait forever): the wait for a record's
    /// first byte and for each read; the whole record has [`SecureReader::record_time`].
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.reader.set_read_timeout(t)
    }

    /// Largest record accepted from the other side.
    pub fn set_max_record(&mut self, n: usize) {
        self.reader.set_max_record(n);
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.writer.stream.peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.writer.stream.local_addr()
    }

    /// Splits into halves usable from two threads.
    pub fn split(self) -> (SecureReader, SecureWriter) {
        (self.reader, self.writer)
    }
}

impl SecureWriter {
    /// Sends one record.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), SecureError> {
        let body = postcard::to_allocvec(msg).map_err(|e| SecureError::Malformed(e.to_string()))?;
        let wire = self.seal(&body)?;
        self.stream.write_all(&wire).map_err(io_err)
    }

    /// Sends a refusal record saying `why` (cut to [`MAX_REFUSAL`] bytes) by `deadline`, then
    /// closes the sending direction; errors are ignored (the connection ends anyway).
    fn refuse(&mut self, why: &str, deadline: Instant) {
        let mut n = why.len().min(MAX_REFUSAL);
        while !why.is_char_boundary(n) {
            n -= 1;
        }
        let mut plain = Vec::with_capacity(4 + n);
        plain.extend_from_slice(&REFUSAL.to_le_bytes());
        plain.extend_from_slice(&why.as_bytes()[..n]);
        let noise = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(k) = noise.write_message(self.nonce, &plain, &mut self.out) else { return };
        drop(noise);
        self.nonce += 1;
        let mut wire = Vec::with_capacity(2 + k);
        wire.extend_from_slice(&(k as u16).to_be_bytes());
        wire.extend_from_slice(&self.out[..k]);
        let _ = Bounded::new(&self.stream, deadline).write_all(&wire);
        self.shutdown();
    }

    /// A record's frames as they go on the wire: its length, then `body`, in chunks.
    fn seal(&mut self, body: &[u8]) -> Result<Vec<u8>, SecureError> {
        let mut plain = Vec::with_capacity(4 + body.len());
        plain.extend_from_slice(&(body.len() as u32).to_le_bytes());
        plain.extend_from_slice(body);
        let mut wire = Vec::with_capacity(plain.len() + (plain.len() / CHUNK + 1) * (TAG + 2));
        let noise = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in plain.chunks(CHUNK) {
            let n = noise.write_message(self.nonce, chunk, &mut self.out).map_err(|_| SecureError::Forged)?;
            self.nonce += 1;
            wire.extend_from_slice(&(n as u16).to_be_bytes());
            wire.extend_from_slice(&self.out[..n]);
        }
        drop(noise);
        Ok(wire)
    }

    /// Closes the sending direction (the other side reads a clean end of stream).
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    /// Closes the whole connection.
    pub fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl SecureReader {
    /// Receives one record; `Ok(None)` when the other side closed the connection cleanly.
    /// The wait for its first byte is bounded by the read time-out, the rest of it by
    /// [`SecureReader::record_time`] (see the module doc).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, SecureError> {
        let budget = self.record_time();
        let mut clock = RecordClock { stream: &self.stream, budget, started: None };
        let got = self.records.recv(&mut clock);
        if let Some((idle, _)) = clock.started {
            let _ = self.stream.set_read_timeout(idle);
        }
        got
    }

    /// Read time-out for the next receives (`None`: wait forever): the wait for a record's
    /// first byte and for each read.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// Largest record accepted from the other side.
    pub fn set_max_record(&mut self, n: usize) {
        self.records.max_record = n;
    }

    /// Time a record has from its first byte to its last: the one set, else
    /// [`RECORD_TIMEOUT`] plus the largest record's size at [`RECORD_MIN_RATE`].
    pub fn record_time(&self) -> Duration {
        self.record_time.unwrap_or_else(|| {
            RECORD_TIMEOUT + Duration::from_millis(self.records.max_record as u64 * 1000 / RECORD_MIN_RATE)
        })
    }

    /// Sets the time a record has from its first byte to its last (`None`: the default).
    pub fn set_record_time(&mut self, t: Option<Duration>) {
        self.record_time = t;
    }

    /// Fuzzing only (feature `fuzzing`): a record layer for this connection's incoming
    /// direction as it was right after the handshake (same keys and limit, first nonce, empty
    /// buffers), to be fed from memory; the connection itself is untouched. Restarting the
    /// nonce would accept replayed records, which is why product builds do not have it.
    #[cfg(feature = "fuzzing")]
    pub fn fresh_records(&self) -> RecordReader {
        RecordReader { max_record: self.records.max_record, ..RecordReader::new(self.records.noise.clone()) }
    }
}

/// The socket as a record sees it: the first byte waits for the read time-out, and starts
/// the record's deadline, which bounds every read after it.
struct RecordClock<'a> {
    stream: &'a TcpStream,
    budget: Duration,
    /// Once the first byte came: the read time-out (restored after the record) and the
    /// record's deadline.
    started: Option<(Option<Duration>, Instant)>,
}

impl Read for RecordClock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some((idle, deadline)) = self.started else {
            let n = (&mut &*self.stream).read(buf)?;
            if n > 0 {
                self.started = Some((self.stream.read_timeout()?, Instant::now() + self.budget));
            }
            return Ok(n);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "record deadline passed"));
        }
        self.stream.set_read_timeout(Some(idle.map_or(left, |i| i.min(left))))?;
        (&mut &*self.stream).read(buf)
    }
}

/// Decodes a record that must be one whole value: bytes left after it make it malformed.
pub fn decode_whole<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SecureError> {
    match postcard::take_from_bytes(bytes) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(SecureError::Malformed(format!("{} bytes after the record's value", rest.len()))),
        Err(e) => Err(SecureError::Malformed(e.to_string())),
    }
}

impl RecordReader {
    fn new(noise: Arc<Mutex<StatelessTransportState>>) -> Self {
        RecordReader {
            noise,
            nonce: 0,
            max_record: DEFAULT_MAX_RECORD,
            frame: Vec::new(),
            plain: Vec::new(),
            ready: false,
            hello: None,
            peer: None,
            refused: false,
            tell: None,
        }
    }

    /// Member mode: reads the other side's hello (unless done) and checks its certificate
    /// (the grid's owner signed it, valid now, not revoked) and its signature (by the
    /// certificate's key, over this handshake's hash, for the other side's role). A refusal
    /// is final: every later receive fails.
    fn check_hello(&mut self, r: &mut impl Read) -> Result<(), SecureError> {
        if self.refused {
            return Err(SecureError::Handshake("the other side's certificate was refused".into()));
        }
        let Some(check) = self.hello.take() else { return Ok(()) };
        self.refused = true;
        let max = std::mem::replace(&mut self.max_record, MAX_HELLO);
        let got = self.read_record(r);
        self.max_record = max;
        if !got? {
            return Err(SecureError::Handshake("closed before its certificate".into()));
        }
        let theirs: Hello = decode_whole(&self.plain[4..])?;
        let m = &check.member;
        // The proof of the key first: a certificate the owner signed, of a side that proved
        // its key, is a member's, which is told why it is refused.
        theirs.cert.check_hello(check.signer_initiator, &check.hash, &theirs.sig)?;
        let revoked = m.revoked.read().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = theirs.cert.check(&m.owner, unix_now_s(), &revoked) {
            if matches!(e, CertError::Expired(..) | CertError::NotYetValid(_) | CertError::Revoked(_)) {
                self.tell = Some(e.to_string());
            }
            return Err(e.into());
        }
        self.peer = Some(theirs.cert);
        self.refused = false;
        Ok(())
    }

    fn read_chunk(&mut self, r: &mut impl Read) -> Result<Option<usize>, SecureError> {
        let Some(n) = read_frame(r, &mut self.frame)? else { return Ok(None) };
        if n < TAG {
            return Err(SecureError::Forged);
        }
        let start = self.plain.len();
        self.plain.resize(start + n - TAG, 0);
        let noise = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        let k = noise
            .read_message(self.nonce, &self.frame[..n], &mut self.plain[start..])
            .map_err(|_| SecureError::Forged)?;
        drop(noise);
        self.nonce += 1;
        self.plain.truncate(start + k);
        Ok(Some(k))
    }

    /// Reads and decodes one record from `r` (unless one was read ahead); `Ok(None)` on a
    /// clean end of stream before it. Bytes after the record's value make it malformed.
    pub fn recv<T: DeserializeOwned>(&mut self, r: &mut impl Read) -> Result<Option<T>, SecureError> {
        if self.hello.is_some() || self.refused {
            self.check_hello(r)?;
        }
        if !std::mem::take(&mut self.ready) && !self.read_record(r)? {
            return Ok(None);
        }
        decode_whole(&self.plain[4..]).map(Some)
    }

    /// Reads one whole record into `plain`, not decoded; `Ok(false)` on a clean end of
    /// stream before it.
    fn read_record(&mut self, r: &mut impl Read) -> Result<bool, SecureError> {
        self.plain.clear();
        if self.read_chunk(r)?.is_none() {
            return Ok(false);
        }
        if self.plain.len() < 4 {
            return Err(SecureError::Malformed("record shorter than its length".into()));
        }
        let total = u32::from_le_bytes(self.plain[..4].try_into().unwrap()) as usize;
        if total == REFUSAL as usize {
            let n = self.plain.len().min(4 + MAX_REFUSAL);
            return Err(SecureError::RefusedBy(String::from_utf8_lossy(&self.plain[4..n]).into_owned()));
        }
        if total > self.max_record {
            return Err(SecureError::TooLong(total, self.max_record));
        }
        while self.plain.len() < 4 + total {
            if self.read_chunk(r)?.is_none() {
                return Err(SecureError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        if self.plain.len() != 4 + total {
            return Err(SecureError::Malformed("record longer than announced".into()));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    fn pair(a: &str, b: &str) -> (Result<SecureConn, SecureError>, Result<SecureConn, SecureError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sa = GridSecret::from_phrase(a);
        let sb = GridSecret::from_phrase(b);
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            SecureConn::accept(s, &sb, Duration::from_secs(2))
        });
        let c = SecureConn::connect(addr, &sa, Duration::from_secs(2));
        (c, t.join().unwrap())
    }

    #[test]
    fn records_of_every_size_roundtrip() {
        let (c, s) = pair("open sesame", "open sesame");
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        s.set_max_record(1 << 22);
        for len in [0usize, 1, 100, CHUNK - 4, CHUNK - 3, CHUNK, 3 * CHUNK + 17, 1 << 20] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            c.send(&v).unwrap();
            let got: Vec<u8> = s.recv().unwrap().unwrap();
            assert_eq!(got, v, "len {len}");
        }
        s.send(&("back", 7u32)).unwrap();
        let back: (String, u32) = c.recv().unwrap().unwrap();
        assert_eq!(back, ("back".to_string(), 7));
        drop(c);
        assert!(s.recv::<u8>().unwrap().is_none());
    }

    /// A keyed connection to a server that accepts the grid's secret and knows `known`'s key.
    fn keyed(label: &str, key: [u8; 32]) -> (Result<SecureConn, SecureError>, Result<Option<String>, SecureError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let lookup = |label: &str| (label == "job-1").then(|| GridSecret::keyed(&[1; 32]));
            let r = SecureConn::accept_keyed(s, &GridSecret::from_phrase("grid"), &lookup, Duration::from_secs(2));
            r.and_then(|(mut c, label)| {
                let got: String = c.recv()?.unwrap_or_default();
                c.send(&got)?;
                Ok(label)
            })
        });
        let c = SecureConn::connect_keyed(None, addr, label, &GridSecret::keyed(&key), Duration::from_secs(2))
            .and_then(|mut c| c.call::<_, String>(&"ping".to_string()).map(|_| c));
        (c, t.join().unwrap())
    }

    #[test]
    fn keyed_connections_need_their_label_s_key_and_grid_ones_still_open() {
        let (c, s) = keyed("job-1", [1; 32]);
        assert!(c.is_ok(), "{:?}", c.err());
        assert_eq!(s.unwrap(), Some("job-1".to_string()));
        let (c, s) = keyed("job-1", [2; 32]);
        assert!(c.is_err() && s.is_err(), "another key is refused");
        let (c, s) = keyed("job-2", [1; 32]);
        assert!(c.is_err() && matches!(s, Err(SecureError::Handshake(m)) if m.contains("no key")), "unknown label");
        // A grid connection on the same port: no label.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let none = |_: &str| None;
            let (mut c, label) =
                SecureConn::accept_keyed(s, &GridSecret::from_phrase("grid"), &none, Duration::from_secs(2)).unwrap();
            let got: String = c.recv().unwrap().unwrap();
            (label, got)
        });
        let mut c = SecureConn::connect(addr, &GridSecret::from_phrase("grid"), Duration::from_secs(2)).unwrap();
        c.send(&"hello".to_string()).unwrap();
        assert_eq!(t.join().unwrap(), (None, "hello".to_string()));
        let long = "x".repeat(MAX_LABEL + 1);
        assert!(
            SecureConn::connect_keyed(None, addr, &long, &GridSecret::keyed(&[1; 32]), Duration::from_secs(1)).is_err()
        );
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides() {
        let (c, s) = pair("right", "wrong");
        assert!(matches!(s, Err(SecureError::Handshake(_))), "responder refuses");
        assert!(c.is_err(), "initiator fails too");
    }

    #[test]
    fn garbage_and_oversized_records_are_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            SecureConn::accept(s, &GridSecret::from_phrase("x"), Duration::from_millis(500))
        });
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(t.join().unwrap().is_err());

        let (c, s) = pair("k", "k");
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        s.set_max_record(1000);
        c.send(&vec![0u8; 5000]).unwrap();
        assert!(matches!(s.recv::<Vec<u8>>(), Err(SecureError::TooLong(_, 1000))));
    }

    /// One deadline for the whole handshake: a client trickling its first message a byte at
    /// a time, each byte well within the time-out, is dropped when the deadline passes.
    #[test]
    fn a_trickling_peer_cannot_stretch_the_handshake() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let trickler = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let start = Instant::now();
            // A length announcing 48 bytes, then one byte every 100 ms until the other side
            // closes (bounded: 100 bytes).
            let _ = s.write_all(&[0, 48]);
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(&[7]).is_err() {
                    break;
                }
                let mut b = [0u8; 1];
                if matches!(s.read(&mut b), Ok(0)) {
                    break;
                }
            }
            start.elapsed()
        });
        let (s, _) = l.accept().unwrap();
        let start = Instant::now();
        let e = SecureConn::accept(s, &GridSecret::from_phrase("x"), Duration::from_millis(600)).err().unwrap();
        let took = start.elapsed();
        assert!(e.is_timeout(), "{e}");
        assert!(took >= Duration::from_millis(550) && took < Duration::from_millis(1500), "{took:?}");
        let lasted = trickler.join().unwrap();
        assert!(lasted < Duration::from_secs(3), "the trickler was served for {lasted:?}");
    }

    /// The same deadline bounds the initiator: a server that accepted but trickles its answer.
    #[test]
    fn the_initiator_has_one_deadline_too() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(&[0, 48]);
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(&[7]).is_err() {
                    break;
                }
            }
        });
        let start = Instant::now();
        let e = SecureConn::connect(addr, &GridSecret::from_phrase("x"), Duration::from_millis(600)).err().unwrap();
        assert!(e.is_timeout(), "{e}");
        assert!(start.elapsed() < Duration::from_millis(1500), "{:?}", start.elapsed());
    }

    /// A canceller closes a connection from another thread, in the handshake or after it.
    #[test]
    fn a_canceller_closes_the_connection_in_any_phase() {
        // In the handshake: the server accepted (the kernel did) but never answers.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = Canceller::new();
        let c2 = cancel.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            c2.cancel();
        });
        let start = Instant::now();
        let r = SecureConn::connect_cancellable(
            None,
            addr,
            &GridSecret::from_phrase("x"),
            Duration::from_secs(30),
            &cancel,
        );
        assert!(r.is_err());
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        t.join().unwrap();
        assert!(cancel.is_cancelled());
        // Cancelled before: refused at once.
        assert!(SecureConn::connect_cancellable(
            None,
            addr,
            &GridSecret::from_phrase("x"),
            Duration::from_secs(30),
            &cancel
        )
        .is_err());
        drop(l);

        // After the handshake: a receive waiting for an answer that never comes.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let secret = GridSecret::from_phrase("k");
        let server = {
            let secret = secret.clone();
            std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                let c = SecureConn::accept(s, &secret, Duration::from_secs(5)).unwrap();
                std::thread::sleep(Duration::from_secs(1));
                drop(c);
            })
        };
        let cancel = Canceller::new();
        let mut c = SecureConn::connect_cancellable(None, addr, &secret, Duration::from_secs(5), &cancel).unwrap();
        let c2 = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            c2.cancel();
        });
        let start = Instant::now();
        assert!(!matches!(c.recv::<u32>(), Ok(Some(_))));
        assert!(start.elapsed() < Duration::from_millis(900), "{:?}", start.elapsed());
        server.join().unwrap();
    }

    /// The initiator's first handshake message, as a real client sends it.
    fn record_first_message(secret: &GridSecret) -> Vec<u8> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let s2 = secret.clone();
        let client = std::thread::spawn(move || SecureConn::connect(addr, &s2, Duration::from_millis(500)));
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut frame = Vec::new();
        let n = read_frame(&mut s, &mut frame).unwrap().unwrap();
        drop(s);
        assert!(client.join().unwrap().is_err(), "nobody answered it");
        let mut wire = (n as u16).to_be_bytes().to_vec();
        wire.extend_from_slice(&frame[..n]);
        wire
    }

    /// A recorded first message replayed: the responder's handshake goes through (nothing in
    /// that message is fresh), but the connection is never proven — the replayer cannot make
    /// a first record under this handshake's keys, and garbage or silence fails.
    #[test]
    fn a_replayed_handshake_is_never_proven() {
        let secret = GridSecret::from_phrase("replay");
        let recorded = record_first_message(&secret);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // Silence, then a whole frame of garbage where the first record should be.
        let garbage: Vec<u8> = [0, 20].into_iter().chain([7u8; 20]).collect();
        for tail in [&[][..], &garbage[..]] {
            let mut r = TcpStream::connect(addr).unwrap();
            r.write_all(&recorded).unwrap();
            r.write_all(tail).unwrap();
            let (s, _) = l.accept().unwrap();
            let s2 = s.try_clone().unwrap();
            // The plain handshake is fooled: that is why a server waits for the proof.
            let mut c =
                SecureConn::accept(s, &secret, Duration::from_secs(2)).expect("the replay passes the handshake");
            let start = Instant::now();
            let e = c.await_proof(Instant::now() + Duration::from_millis(400)).expect_err("not proven");
            assert!(start.elapsed() < Duration::from_millis(1500), "{:?}", start.elapsed());
            if tail.is_empty() {
                assert!(e.is_timeout(), "{e}");
            } else {
                assert!(matches!(e, SecureError::Forged | SecureError::Io(_)), "{e}");
            }
            drop(s2);
        }
        // `accept_proven` refuses it in one go; an honest client is proven and its first
        // record is the first one received.
        let mut r = TcpStream::connect(addr).unwrap();
        r.write_all(&recorded).unwrap();
        let (s, _) = l.accept().unwrap();
        assert!(SecureConn::accept_proven(s, &secret, Duration::from_millis(400)).is_err());
        let s2 = secret.clone();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = SecureConn::accept_proven(s, &s2, Duration::from_secs(5)).unwrap();
            let first: String = c.recv().unwrap().unwrap();
            let second: u32 = c.recv().unwrap().unwrap();
            (first, second)
        });
        let mut c = SecureConn::connect(addr, &secret, Duration::from_secs(5)).unwrap();
        c.send(&"hello".to_string()).unwrap();
        c.send(&7u32).unwrap();
        assert_eq!(t.join().unwrap(), ("hello".to_string(), 7));
    }

    /// One deadline for a whole record: a client that announced one and sends a byte every
    /// 100 ms (well within the read time-out) is dropped at the record's deadline.
    #[test]
    fn a_trickling_record_is_dropped_at_its_deadline() {
        let (c, s) = pair("k", "k");
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.reader.set_record_time(Some(Duration::from_millis(600)));
        let wire = c.writer.seal(&vec![1u8; 2000]).unwrap();
        let raw = c.writer.stream.try_clone().unwrap();
        let trickler = std::thread::spawn(move || {
            for b in wire {
                // The attack's pacing: one byte per 100 ms.
                std::thread::sleep(Duration::from_millis(100));
                if (&raw).write_all(&[b]).is_err() {
                    break;
                }
            }
        });
        let start = Instant::now();
        let e = s.recv::<Vec<u8>>().expect_err("dropped");
        let took = start.elapsed();
        assert!(e.is_timeout(), "{e}");
        assert!(took >= Duration::from_millis(600) && took < Duration::from_millis(2000), "{took:?}");
        // The read time-out in force before the record is back.
        assert_eq!(s.reader.stream.read_timeout().unwrap(), Some(Duration::from_secs(5)));
        c.writer.close();
        trickler.join().unwrap();
    }

    /// A record is its whole message: bytes after a valid value make it malformed.
    #[test]
    fn trailing_bytes_after_a_record_are_refused() {
        let (c, s) = pair("k", "k");
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        let mut body = postcard::to_allocvec(&(5u32, "x".to_string())).unwrap();
        let wire = c.writer.seal(&body).unwrap();
        c.writer.stream.write_all(&wire).unwrap();
        assert_eq!(s.recv::<(u32, String)>().unwrap().unwrap(), (5, "x".to_string()));
        body.extend_from_slice(&[0, 0, 9]);
        let wire = c.writer.seal(&body).unwrap();
        c.writer.stream.write_all(&wire).unwrap();
        let e = s.recv::<(u32, String)>().expect_err("refused");
        assert!(matches!(&e, SecureError::Malformed(m) if m.contains("3 bytes after")), "{e}");
        assert!(matches!(decode_whole::<u8>(&[1, 2]), Err(SecureError::Malformed(_))));
        assert_eq!(decode_whole::<u8>(&[1]).unwrap(), 1);
    }

    mod members {
        use super::*;
        use crate::identity::{Role, Roles};

        fn now() -> u64 {
            unix_now_s()
        }

        /// A grid's owner and a member credential of it.
        fn member(owner: &KeyPair, name: &str, seed: u8, from: u64, validity: u64) -> GridSecret {
            let key = KeyPair::from_seed(&[seed; 32]);
            let roles = Roles::NONE.with(Role::Host).with(Role::Submit);
            let cert = owner.issue(name, key.public(), roles, from, validity).unwrap();
            GridSecret::member(key, cert, owner.public())
        }

        fn pair_with(
            a: GridSecret,
            b: GridSecret,
        ) -> (Result<SecureConn, SecureError>, Result<SecureConn, SecureError>) {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // The server as a daemon runs it: the handshake, then the client's proof.
            let t = std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                let deadline = Instant::now() + Duration::from_secs(2);
                SecureConn::accept(s, &b, Duration::from_secs(2)).and_then(|mut c| {
                    assert!(c.peer_member().is_none(), "not checked before the proof");
                    c.await_proof(deadline).map(|()| c)
                })
            });
            let c = SecureConn::connect(addr, &a, Duration::from_secs(2));
            (c, t.join().unwrap())
        }

        #[test]
        fn members_authenticate_each_other_and_learn_the_names() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let (c, s) = pair_with(member(&owner, "alice", 2, now(), 3600), member(&owner, "bob", 3, now(), 3600));
            let (mut c, mut s) = (c.unwrap(), s.unwrap());
            assert_eq!(c.peer_member().unwrap().body.name, "bob");
            assert_eq!(s.peer_member().unwrap().body.name, "alice");
            // The first request after the hellos is the first record the server receives.
            c.send(&"job".to_string()).unwrap();
            assert_eq!(s.recv::<String>().unwrap().unwrap(), "job");
            s.send(&1u8).unwrap();
            assert_eq!(c.recv::<u8>().unwrap().unwrap(), 1);
        }

        #[test]
        fn an_expired_forged_or_foreign_certificate_is_refused() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let good = || member(&owner, "bob", 3, now() - 10, 3600);
            // Expired an hour ago.
            let (_, s) = pair_with(member(&owner, "alice", 2, now() - 7200, 3600), good());
            assert!(matches!(s, Err(SecureError::Refused(CertError::Expired(..)))), "{:?}", s.err());
            // Its roles raised after signing.
            let key = KeyPair::from_seed(&[2; 32]);
            let mut cert = owner.issue("alice", key.public(), Roles::NONE, now(), 3600).unwrap();
            cert.body.roles = Roles::ALL;
            let (_, s) = pair_with(GridSecret::member(key, cert, owner.public()), good());
            assert!(matches!(s, Err(SecureError::Refused(CertError::Forged))), "{:?}", s.err());
            // Signed by another owner but claiming this grid: the pre-shared key matches,
            // the signature does not.
            let other = KeyPair::from_seed(&[7; 32]);
            let key = KeyPair::from_seed(&[2; 32]);
            let mut cert = other.issue("alice", key.public(), Roles::ALL, now(), 3600).unwrap();
            cert.body.grid = owner.public();
            let (_, s) = pair_with(GridSecret::member(key, cert, owner.public()), good());
            assert!(matches!(s, Err(SecureError::Refused(CertError::Forged))), "{:?}", s.err());
            // The initiator refuses an expired responder too.
            let (c, _) = pair_with(good(), member(&owner, "carol", 4, now() - 7200, 3600));
            assert!(matches!(c, Err(SecureError::Refused(CertError::Expired(..)))), "{:?}", c.err());
        }

        /// The client's first receive after the server refused its certificate.
        fn told(client: GridSecret, server: GridSecret) -> (Result<u8, SecureError>, SecureError) {
            let (c, s) = pair_with(client, server);
            let mut c = c.expect("the client checked the server");
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let got = c.call::<_, u8>(&"job".to_string());
            (got, s.err().expect("the server refuses"))
        }

        #[test]
        fn a_refused_member_is_told_why_and_a_stranger_is_not() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let good = || member(&owner, "bob", 3, now() - 10, 3600);
            let (c, s) = told(member(&owner, "alice", 2, now() - 7200, 3600), good());
            assert!(matches!(s, SecureError::Refused(CertError::Expired(..))), "{s}");
            let c = c.unwrap_err();
            assert!(matches!(&c, SecureError::RefusedBy(w) if w.starts_with("certificate of alice expired")), "{c}");
            // Revoked.
            let server = good();
            let mut list = crate::identity::RevocationList::new(owner.public());
            let (_, refused) = list.merge(vec![owner.revoke("alice", None, now()).unwrap()]);
            assert!(refused.is_empty());
            server.member_info().unwrap().set_revoked(list.revocations());
            let (c, _) = told(member(&owner, "alice", 2, now() - 10, 3600), server);
            let c = c.unwrap_err();
            assert!(matches!(&c, SecureError::RefusedBy(w) if w == "member alice is revoked"), "{c}");
            // A certificate the owner did not sign (its roles raised): no word, the connection
            // just ends.
            let key = KeyPair::from_seed(&[2; 32]);
            let mut cert = owner.issue("alice", key.public(), Roles::NONE, now(), 3600).unwrap();
            cert.body.roles = Roles::ALL;
            let (c, s) = told(GridSecret::member(key, cert, owner.public()), good());
            assert!(matches!(s, SecureError::Refused(CertError::Forged)), "{s}");
            assert!(!matches!(c, Err(SecureError::RefusedBy(_))), "{:?}", c);
            // A valid certificate without its key: the same.
            let victim = KeyPair::from_seed(&[2; 32]);
            let cert = owner.issue("alice", victim.public(), Roles::ALL, now() - 7200, 3600).unwrap();
            let (c, s) = told(GridSecret::member(KeyPair::from_seed(&[9; 32]), cert, owner.public()), good());
            assert!(matches!(s, SecureError::Refused(CertError::BadProof(_))), "{s}");
            assert!(!matches!(c, Err(SecureError::RefusedBy(_))), "{:?}", c);
        }

        #[test]
        fn a_certificate_without_its_key_is_refused() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let victim = KeyPair::from_seed(&[2; 32]);
            let cert = owner.issue("alice", victim.public(), Roles::ALL, now(), 3600).unwrap();
            let thief = GridSecret::member(KeyPair::from_seed(&[9; 32]), cert, owner.public());
            let (_, s) = pair_with(thief, member(&owner, "bob", 3, now(), 3600));
            assert!(matches!(s, Err(SecureError::Refused(CertError::BadProof(_)))), "{:?}", s.err());
        }

        #[test]
        fn a_revoked_member_is_refused() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let server = member(&owner, "bob", 3, now(), 3600);
            server.member_info().unwrap().revoked.write().unwrap().names.insert("alice".into());
            let (_, s) = pair_with(member(&owner, "alice", 2, now(), 3600), server);
            assert!(matches!(s, Err(SecureError::Refused(CertError::Revoked(_)))), "{:?}", s.err());
        }

        #[test]
        fn modes_and_grids_do_not_mix() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let other = KeyPair::from_seed(&[8; 32]);
            let (c, s) = pair_with(GridSecret::from_phrase("x"), member(&owner, "bob", 3, now(), 3600));
            assert!(c.is_err() && matches!(s, Err(SecureError::Handshake(_))));
            let (c, s) = pair_with(member(&other, "eve", 2, now(), 3600), member(&owner, "bob", 3, now(), 3600));
            assert!(c.is_err() && matches!(s, Err(SecureError::Handshake(_))));
        }

        /// A replayed first handshake message of a member: the replayer cannot send a hello
        /// that decrypts under this handshake, so `accept` itself fails.
        #[test]
        fn a_replayed_member_handshake_is_refused() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let alice = member(&owner, "alice", 2, now(), 3600);
            let recorded = record_first_message(&alice);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let mut r = TcpStream::connect(addr).unwrap();
            r.write_all(&recorded).unwrap();
            let (s, _) = l.accept().unwrap();
            let start = Instant::now();
            let bob = member(&owner, "bob", 3, now(), 3600);
            assert!(SecureConn::accept_proven(s, &bob, Duration::from_millis(400)).is_err());
            assert!(start.elapsed() < Duration::from_millis(1500));
            // A server that receives without awaiting the proof checks the hello first.
            let mut r = TcpStream::connect(addr).unwrap();
            r.write_all(&recorded).unwrap();
            r.write_all(&[0, 40]).unwrap();
            r.write_all(&[9u8; 40]).unwrap();
            let (s, _) = l.accept().unwrap();
            let mut c = SecureConn::accept(s, &bob, Duration::from_millis(400)).expect("a replay passes the handshake");
            c.set_read_timeout(Some(Duration::from_millis(400))).unwrap();
            assert!(c.recv::<u8>().is_err());
            assert!(c.recv::<u8>().is_err(), "a refusal is final");
            assert!(c.peer_member().is_none());
        }

        /// A client that does not await the proof but receives at once still gets the hello
        /// checked before its first record (the JEL's servers work so).
        #[test]
        fn a_receive_checks_the_hello_first() {
            let owner = KeyPair::from_seed(&[1; 32]);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let bob = member(&owner, "bob", 3, now(), 3600);
            let t = std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                let mut c = SecureConn::accept(s, &bob, Duration::from_secs(2)).unwrap();
                let v: u32 = c.recv().unwrap().unwrap();
                (v, c.peer_member().map(|p| p.body.name.clone()))
            });
            let mut c =
                SecureConn::connect(addr, &member(&owner, "alice", 2, now(), 3600), Duration::from_secs(2)).unwrap();
            c.send(&5u32).unwrap();
            assert_eq!(t.join().unwrap(), (5, Some("alice".to_string())));
        }
    }

    #[test]
    fn a_stalled_peer_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _silent = TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        let e = SecureConn::accept(s, &GridSecret::from_phrase("x"), Duration::from_millis(200)).err().unwrap();
        assert!(e.is_timeout(), "{e}");
    }
}
