//! The device between two engines of one test process, over loopback TCP.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const MSG: usize = 64 << 10;

fn pair() -> (Engine, Engine) {
    let key = JobKey::from_bytes([7; p2pmpi_wire::auth::KEY_LEN]);
    let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
    let e0 = Engine::new(0, 2, 0, None, key.clone(), Some(l0), addrs.clone(), Duration::ZERO).unwrap();
    let e1 = Engine::new(1, 2, 1, None, key, Some(l1), addrs, Duration::ZERO).unwrap();
    (e0, e1)
}

/// A receiver slower than its sender: one progress call reads a bounded amount and returns,
/// so that a wait whose request completed is not held in the device for as long as the
/// sender keeps sending (found in CI: a barrier's release, read first, was only seen when the
/// sender stopped streaming 30 s later).
#[test]
fn one_progress_call_reads_a_bounded_amount_from_a_streaming_sender() {
    let (mut e0, mut e1) = pair();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            e0.connect_mesh(Duration::from_secs(10)).unwrap();
            let buf = vec![1u8; MSG];
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let r = e0.isend(0, 1, 5, buf.as_ptr(), MSG, SendMode::Standard).unwrap();
                while !e0.is_done(r) && !stop.load(Ordering::Relaxed) {
                    e0.progress(None, Some(Duration::from_millis(1)));
                }
                e0.take_done(r);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // The receiver connects, then reads nothing until the kernel holds more than the
    // budget plus a read buffer (the sender keeps writing all along).
    let t0 = Instant::now();
    while e1.connect_mesh(Duration::from_millis(10)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the pair did not connect");
    }
    let want = (READ_BUDGET + conn::RBUF) / MSG + 8;
    while sent.load(Ordering::Relaxed) < want {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the sender wrote only {} messages",
            sent.load(Ordering::Relaxed)
        );
        std::thread::yield_now();
    }
    let before = e1.matcher.unexpected_len();
    e1.progress(None, Some(Duration::from_millis(100)));
    let read = e1.matcher.unexpected_len() - before;
    // What one call may take: the budget, plus what the last read brought in.
    let most = (READ_BUDGET + conn::RBUF) / MSG + 1;
    assert!(read > 0, "nothing read");
    assert!(read <= most, "one progress call queued {read} messages of 64 KiB (at most {most} expected)");
    // What is left is read by the next calls, though no new readiness event comes for it.
    let mut got = e1.matcher.unexpected_len();
    let t1 = Instant::now();
    while got < want {
        assert!(t1.elapsed() < Duration::from_secs(20), "only {got} of {want} messages arrived");
        e1.progress(None, Some(Duration::from_millis(10)));
        got = e1.matcher.unexpected_len();
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
}
