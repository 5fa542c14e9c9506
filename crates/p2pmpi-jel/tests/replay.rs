//! A replayed first handshake message never counts as a connection of a JEL listener.
//!
//! The first message of the grid's Noise handshake carries nothing fresh from the server: a
//! real client's is recorded here and replayed, without the secret, to a real registry. The
//! listener answers the handshake but, as the client never proves the key by a first record,
//! keeps the connection among those still opening (at most `MAX_PENDING`, the oldest pushed
//! out by a newcomer): replaying twice that many closes the first half at once, instead of
//! letting each hold a served connection until its time-out. A client with the secret is
//! served meanwhile.

use p2pmpi_jel::GridSecret;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const MAX_PENDING: usize = 64;
/// The listener's bound on the handshake and the proof (`OPEN_TIMEOUT`).
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

fn secret() -> GridSecret {
    GridSecret::from_phrase("jel replay test")
}

/// A real client's first handshake message, as seen on the wire.
fn record_first_message() -> Vec<u8> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let client = std::thread::spawn(move || p2pmpi_jel::list(addr, &secret(), "pool", Duration::from_secs(3)));
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).unwrap();
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut msg).unwrap();
    drop(s);
    assert!(client.join().unwrap().is_err(), "the recording listener never answered");
    [len.to_vec(), msg].concat()
}

fn closed(mut s: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn a_replayed_handshake_to_a_registry_stays_pending_and_is_pushed_out() {
    let recorded = record_first_message();
    let server = p2pmpi_jel::serve_registry("127.0.0.1:0".parse::<SocketAddr>().unwrap(), secret()).unwrap();
    let target = server.addr;
    let first = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..2 * MAX_PENDING {
        let mut s = TcpStream::connect(target).unwrap();
        s.write_all(&recorded).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The server's answer: the replay passes the handshake itself.
        let mut len = [0u8; 2];
        s.read_exact(&mut len).unwrap();
        let mut answer = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut answer).unwrap();
        s.set_nonblocking(true).unwrap();
        conns.push(s);
    }
    // The first half is closed at once (pushed out), well before the proof's deadline.
    let by = first + OPEN_TIMEOUT - Duration::from_millis(500);
    let mut evicted = 0;
    while Instant::now() < by {
        evicted = conns[..MAX_PENDING].iter().filter(|s| closed(s)).count();
        if evicted == MAX_PENDING {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        evicted == MAX_PENDING,
        "{evicted} of the first {MAX_PENDING} replayed connections closed within {:?}: the others were served",
        by - first
    );
    // A member with the secret is served while the second half still waits.
    let t = Instant::now();
    let members = p2pmpi_jel::list(target, &secret(), "pool", Duration::from_secs(5)).unwrap();
    assert!(members.is_empty());
    assert!(t.elapsed() < Duration::from_secs(3), "the registry answered in {:?}", t.elapsed());
}
