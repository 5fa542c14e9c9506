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
//! allocated. Malformed, oversized or forged input is an error, never a panic. Reads honour the
//! socket's read time-out, so a connection that stalls ends with an error the caller logs.
//!
//! The handshake has **one deadline** for all of it (TCP connection, every read and write),
//! not a time-out per read: a side that trickles one byte every few seconds cannot make it
//! last longer. A [`Canceller`] lets another thread close a connection in any phase, the
//! handshake included (a watchdog that found the other side frozen).

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

/// The grid secret, reduced to the 32-byte pre-shared key of the handshake.
#[derive(Clone)]
pub struct GridSecret([u8; 32]);

impl GridSecret {
    /// Derives the key from the configured secret phrase (any length, any bytes).
    pub fn from_phrase(phrase: &str) -> Self {
        GridSecret(blake3::derive_key("p2pmpi grid secret v1", phrase.as_bytes()))
    }
}

impl std::fmt::Debug for GridSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GridSecret(…)")
    }
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
}

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

fn builder(secret: &GridSecret) -> Result<snow::Builder<'_>, SecureError> {
    let params = NOISE_PARAMS.parse().map_err(|e| SecureError::Handshake(format!("{e:?}")))?;
    snow::Builder::new(params).psk(0, &secret.0).map_err(|e| SecureError::Handshake(format!("{e:?}")))
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

    /// Runs the handshake as responder on an accepted connection, all of it within `timeout`.
    pub fn accept(stream: TcpStream, secret: &GridSecret, timeout: Duration) -> Result<Self, SecureError> {
        Self::handshake(stream, secret, Instant::now() + timeout, false)
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
        let noise = Arc::new(Mutex::new(hs.into_stateless_transport_mode().map_err(hs_err)?));
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let rstream = stream.try_clone()?;
        Ok(SecureConn {
            reader: SecureReader { stream: rstream, records: RecordReader::new(noise.clone()) },
            writer: SecureWriter { stream, noise, nonce: 0, out: vec![0u8; MAX_NOISE] },
        })
    }

    /// Sends one record.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), SecureError> {
        self.writer.send(msg)
    }

    /// Receives one record; `Ok(None)` when the other side closed the connection cleanly.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, SecureError> {
        self.reader.recv()
    }

    /// Sends a request and waits for its answer (a closed connection is an error).
    pub fn call<Q: Serialize, A: DeserializeOwned>(&mut self, req: &Q) -> Result<A, SecureError> {
        self.send(req)?;
        self.recv()?.ok_or_else(|| SecureError::Io(io::ErrorKind::UnexpectedEof.into()))
    }

    /// Read time-out for the next receives (`None`: wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.reader.stream.set_read_timeout(t)
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
        let mut plain = Vec::with_capacity(4 + body.len());
        plain.extend_from_slice(&(body.len() as u32).to_le_bytes());
        plain.extend_from_slice(&body);
        let mut wire = Vec::with_capacity(plain.len() + (plain.len() / CHUNK + 1) * (TAG + 2));
        let noise = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in plain.chunks(CHUNK) {
            let n = noise.write_message(self.nonce, chunk, &mut self.out).map_err(|_| SecureError::Forged)?;
            self.nonce += 1;
            wire.extend_from_slice(&(n as u16).to_be_bytes());
            wire.extend_from_slice(&self.out[..n]);
        }
        drop(noise);
        self.stream.write_all(&wire).map_err(io_err)
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
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, SecureError> {
        self.records.recv(&mut self.stream)
    }

    /// Read time-out for the next receives (`None`: wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// Largest record accepted from the other side.
    pub fn set_max_record(&mut self, n: usize) {
        self.records.max_record = n;
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

impl RecordReader {
    fn new(noise: Arc<Mutex<StatelessTransportState>>) -> Self {
        RecordReader { noise, nonce: 0, max_record: DEFAULT_MAX_RECORD, frame: Vec::new(), plain: Vec::new() }
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

    /// Reads and decodes one record from `r`; `Ok(None)` on a clean end of stream before it.
    pub fn recv<T: DeserializeOwned>(&mut self, r: &mut impl Read) -> Result<Option<T>, SecureError> {
        self.plain.clear();
        if self.read_chunk(r)?.is_none() {
            return Ok(None);
        }
        if self.plain.len() < 4 {
            return Err(SecureError::Malformed("record shorter than its length".into()));
        }
        let total = u32::from_le_bytes(self.plain[..4].try_into().unwrap()) as usize;
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
        postcard::from_bytes(&self.plain[4..]).map(Some).map_err(|e| SecureError::Malformed(e.to_string()))
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
