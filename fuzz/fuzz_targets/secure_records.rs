//! The secure channel's receiving side (`SecureConn::recv`: frame reading, decryption, chunk
//! reassembly, length checks, postcard decoding) fed by a hostile but authenticated peer.
//!
//! Each run opens a loopback TCP connection and completes a real Noise handshake against
//! `SecureConn::accept`, the harness playing the initiator with `snow` directly (same pattern and
//! key derivation as `p2pmpi_wire::secure`). It then sends the input as frames and lets the
//! accepted connection receive records until the end of the stream or an error.
//!
//! Input: first byte = which record type to decode (low 2 bits) and whether frames are
//! encrypted (bit 2; otherwise they are written raw, which must be refused as forged). Then
//! chunks, each `u16 LE length` + that many bytes (cut at the end of the input); each chunk is
//! one Noise frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::grid::{JobControl, MpdRequest, SnRequest};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

const PHRASE: &str = "fuzzing secret";
const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const TAG: usize = 16;
const MAX_PLAIN: usize = 65535 - TAG;

fn listener() -> &'static TcpListener {
    static L: OnceLock<TcpListener> = OnceLock::new();
    L.get_or_init(|| TcpListener::bind("127.0.0.1:0").expect("bind loopback"))
}

fn write_frame(w: &mut TcpStream, data: &[u8]) {
    let mut buf = Vec::with_capacity(2 + data.len());
    buf.extend_from_slice(&(data.len() as u16).to_be_bytes());
    buf.extend_from_slice(data);
    w.write_all(&buf).expect("harness write");
}

fn read_frame(r: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len).expect("harness read length");
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    r.read_exact(&mut buf).expect("harness read frame");
    buf
}

/// No TIME_WAIT: thousands of connections a second would exhaust the ephemeral ports.
fn no_linger(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    let l = listener();
    let mut client = TcpStream::connect(l.local_addr().unwrap()).expect("connect loopback");
    let (server, _) = l.accept().expect("accept loopback");
    no_linger(&client);
    no_linger(&server);

    // Handshake: NN with a pre-shared key; the initiator writes first, so one thread suffices
    // (the kernel buffers each side's message until the other reads it).
    let key = blake3::derive_key("p2pmpi grid secret v1", PHRASE.as_bytes());
    let mut hs = snow::Builder::new(NOISE_PARAMS.parse().unwrap())
        .psk(0, &key)
        .unwrap()
        .build_initiator()
        .unwrap();
    let mut msg = vec![0u8; 65535];
    let n = hs.write_message(&[], &mut msg).unwrap();
    write_frame(&mut client, &msg[..n]);
    let mut conn = SecureConn::accept(server, &GridSecret::from_phrase(PHRASE), Duration::from_secs(5))
        .expect("handshake with the right secret");
    let reply = read_frame(&mut client);
    let mut scratch = vec![0u8; 65535];
    hs.read_message(&reply, &mut scratch).unwrap();
    let mut tx = hs.into_transport_mode().unwrap();

    // The hostile frames, then the end of the stream.
    let encrypt = mode & 4 != 0;
    while rest.len() >= 2 {
        let want = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        rest = &rest[2..];
        let k = want.min(rest.len());
        let (chunk, tail) = rest.split_at(k);
        rest = tail;
        if encrypt {
            let chunk = &chunk[..k.min(MAX_PLAIN)];
            let n = tx.write_message(chunk, &mut msg).unwrap();
            write_frame(&mut client, &msg[..n]);
        } else {
            write_frame(&mut client, chunk);
        }
    }
    let _ = client.shutdown(Shutdown::Write);

    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..64 {
        let more = match mode & 3 {
            0 => conn.recv::<Vec<u8>>().map(|r| r.is_some()),
            1 => conn.recv::<SnRequest>().map(|r| r.is_some()),
            2 => conn.recv::<MpdRequest>().map(|r| r.is_some()),
            _ => conn.recv::<JobControl>().map(|r| r.is_some()),
        };
        if !matches!(more, Ok(true)) {
            break;
        }
    }
});
