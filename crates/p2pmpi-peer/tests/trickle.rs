//! Issue 38, item 5: one deadline bounds a whole record, not each read.
//!
//! A client of the FT service (with the secret) sends its offer, then starts a chunk record
//! whose bytes reach the service one every 2 s, well within the service's 10 s time-out per
//! read: before, each byte restarted that time-out and the connection was held for as long as
//! the client liked; now the record's deadline (10 s plus its largest size at 1 MiB/s, about
//! 11 s for the FT) closes it. The bytes are slowed by a proxy between the client and the
//! service, so the client is the real one.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::ft::{self, FtContext};
use p2pmpi_wire::grid::{FileMeta, FileSource, FtRequest, FtResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICKET: Ticket = Ticket(0xfeed);
const T: Duration = Duration::from_secs(10);
/// The bound on the trickled record's life: the FT's record deadline and a margin.
const CLOSED_WITHIN: Duration = Duration::from_secs(16);

fn secret() -> GridSecret {
    GridSecret::from_phrase("trickle test grid")
}

/// A proxy for one connection to `to`: forwards both ways at once until `slow` is set, then
/// the client's bytes one every 2 s. Returns its address and a receiver of the moment the
/// service closed the connection.
fn proxy(to: SocketAddr, slow: Arc<AtomicBool>) -> (SocketAddr, std::sync::mpsc::Receiver<Instant>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (client, _) = l.accept().unwrap();
        let server = TcpStream::connect(to).unwrap();
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        // Service → client, as it comes; its end is the moment the service closed.
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            loop {
                match s2.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if c2.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(Instant::now());
            let _ = c2.shutdown(std::net::Shutdown::Both);
        });
        // Client → service.
        let (mut client, mut server) = (client, server);
        let mut buf = [0u8; 65536];
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let n = match client.read(&mut buf[..if slow.load(Ordering::SeqCst) { 1 } else { 65536 }]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if server.write_all(&buf[..n]).is_err() {
                break;
            }
            if slow.load(Ordering::SeqCst) {
                // The attack's pacing: one byte every 2 s.
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    });
    (addr, rx)
}

#[test]
fn a_trickled_record_is_dropped_at_its_deadline() {
    let root = Tmp::new("trickle");
    let ctx = FtContext::new(root.0.join("cache"), root.0.join("jobs"), secret(), |t, _| t == TICKET);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ft_addr = l.local_addr().unwrap();
    ft::serve(l, Arc::new(ctx));
    let slow = Arc::new(AtomicBool::new(false));
    let (addr, closed) = proxy(ft_addr, slow.clone());

    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    let content = vec![5u8; 100_000];
    let source = FileSource::Inline { hash: *blake3::hash(&content).as_bytes(), size: content.len() as u64 };
    let files = vec![FileMeta { name: "f".into(), source, executable: false }];
    let answer: FtResponse = c.call(&FtRequest::Offer { ticket: TICKET, job: "00d1".into(), files }).unwrap();
    assert_eq!(answer, FtResponse::Need(vec![0]));

    slow.store(true, Ordering::SeqCst);
    let start = Instant::now();
    c.send(&FtRequest::Chunk { index: 0, data: content }).unwrap();
    let at = closed.recv_timeout(CLOSED_WITHIN + Duration::from_secs(5)).expect("the service never closed it");
    let life = at - start;
    eprintln!("a record trickled one byte per 2 s: closed by the FT after {life:?}");
    assert!(life < CLOSED_WITHIN, "the trickled record held the connection for {life:?}");
    assert!(life > Duration::from_secs(9), "closed after {life:?}, before the record's deadline");
    assert!(!matches!(c.recv::<FtResponse>(), Ok(Some(_))));
}
