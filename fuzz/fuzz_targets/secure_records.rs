//! The secure channel's record layer (`RecordReader::recv`, which `SecureConn::recv` runs on
//! its socket: frame reading, decryption, chunk reassembly, length checks, postcard decoding)
//! fed by a hostile but authenticated peer.
//!
//! Once per process, the harness opens a loopback TCP connection and completes a real Noise
//! handshake against `SecureConn::accept`, playing the initiator with `snow` directly (same
//! pattern and key derivation as `p2pmpi_wire::secure`). Each input then gets a fresh record
//! layer for that connection's incoming direction (`SecureReader::fresh_records`, feature
//! `fuzzing`: same keys, first nonce, empty buffers), so inputs stay independent; the harness
//! encrypts the input's frames from the first nonce on and the record layer reads them from
//! memory until the end of the stream or an error. (Earlier, each input paid for its own TCP
//! connection and handshake: about 1000 inputs a second instead of tens of thousands; the
//! decoding code is the same, only the byte stream differs.)
//!
//! Input: first byte = which record type to decode (low 2 bits), whether frames are encrypted
//! (bit 2; otherwise they are written raw, which must be refused as forged) and whether the
//! stream hands out its bytes a few at a time with `Interrupted` errors in between (bit 3, as a
//! socket may). Then chunks, each `u16 LE length` + that many bytes (cut at the end of the
//! input); each chunk is one Noise frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::grid::{JobControl, MpdRequest, SnRequest};
use p2pmpi_wire::secure::{GridSecret, SecureConn, SecureError, SecureReader};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const PHRASE: &str = "fuzzing secret";
const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const TAG: usize = 16;
const MAX_PLAIN: usize = 65535 - TAG;

/// One authenticated connection: the accepted side (whose record layer is fuzzed) and the
/// harness's initiator keys. The sockets stay open for the life of the process.
struct Session {
    reader: SecureReader,
    tx: snow::StatelessTransportState,
    _keep: (p2pmpi_wire::secure::SecureWriter, TcpStream),
}

fn write_frame(w: &mut impl Write, data: &[u8]) {
    w.write_all(&(data.len() as u16).to_be_bytes()).expect("harness write");
    w.write_all(data).expect("harness write");
}

fn read_frame(r: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len).expect("harness read length");
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    r.read_exact(&mut buf).expect("harness read frame");
    buf
}

fn handshake() -> Session {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let mut client = TcpStream::connect(l.local_addr().unwrap()).expect("connect loopback");
    let (server, _) = l.accept().expect("accept loopback");
    // NN with a pre-shared key; the initiator writes first, so one thread suffices (the kernel
    // buffers each side's message until the other reads it).
    let key = blake3::derive_key("p2pmpi grid secret v1", PHRASE.as_bytes());
    let mut hs = snow::Builder::new(NOISE_PARAMS.parse().unwrap()).psk(0, &key).unwrap().build_initiator().unwrap();
    let mut msg = vec![0u8; 65535];
    let n = hs.write_message(&[], &mut msg).unwrap();
    write_frame(&mut client, &msg[..n]);
    let conn = SecureConn::accept(server, &GridSecret::from_phrase(PHRASE), Duration::from_secs(5))
        .expect("handshake with the right secret");
    let reply = read_frame(&mut client);
    hs.read_message(&reply, &mut msg).unwrap();
    let tx = hs.into_stateless_transport_mode().unwrap();
    let (reader, writer) = conn.split();
    Session { reader, tx, _keep: (writer, client) }
}

thread_local! {
    static SESSION: Session = handshake();
    static BUF: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = std::cell::RefCell::new((Vec::new(), vec![0u8; 65535]));
}

/// An in-memory stream; in trickle mode it returns 1 to 7 bytes per read and fails every
/// fifth read with `Interrupted` (which readers must retry).
struct Source<'a> {
    data: &'a [u8],
    trickle: bool,
    calls: usize,
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        let mut n = buf.len().min(self.data.len());
        if self.trickle {
            if self.calls % 5 == 0 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            n = n.min(1 + self.calls % 7);
        }
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    SESSION.with(|s| {
        BUF.with(|b| {
            let (wire, msg) = &mut *b.borrow_mut();
            wire.clear();
            // The hostile frames, encrypted from the first nonce on (or raw).
            let encrypt = mode & 4 != 0;
            let mut nonce = 0u64;
            while rest.len() >= 2 {
                let want = u16::from_le_bytes([rest[0], rest[1]]) as usize;
                rest = &rest[2..];
                let k = want.min(rest.len());
                let (chunk, tail) = rest.split_at(k);
                rest = tail;
                if encrypt {
                    let chunk = &chunk[..k.min(MAX_PLAIN)];
                    let n = s.tx.write_message(nonce, chunk, msg).unwrap();
                    nonce += 1;
                    write_frame(wire, &msg[..n]);
                } else {
                    write_frame(wire, chunk);
                }
            }

            let mut records = s.reader.fresh_records();
            let mut src = Source { data: wire, trickle: mode & 8 != 0, calls: 0 };
            for _ in 0..64 {
                let got: Result<Option<()>, SecureError> = match mode & 3 {
                    0 => records.recv::<Vec<u8>>(&mut src).map(|r| r.map(drop)),
                    1 => records.recv::<SnRequest>(&mut src).map(|r| r.map(drop)),
                    2 => records.recv::<MpdRequest>(&mut src).map(|r| r.map(drop)),
                    _ => records.recv::<JobControl>(&mut src).map(|r| r.map(drop)),
                };
                match got {
                    Ok(Some(())) => assert!(encrypt, "a raw frame was accepted"),
                    // A clean end only where the stream ends.
                    Ok(None) => {
                        assert!(src.data.is_empty(), "clean end with {} bytes left", src.data.len());
                        break;
                    }
                    Err(_) => break,
                }
            }
        })
    });
});
