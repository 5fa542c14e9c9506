//! The device between two engines of one test process, over loopback TCP.

use super::engine::{ShmPolicy, READ_BUDGET};
use super::*;
use p2pmpi_core::matching::Pattern;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const MSG: usize = 64 << 10;

/// The engine of a job without replicas that `e` runs.
fn solo(e: &Engine) -> &SoloEngine {
    match e {
        Engine::Solo(c) => c,
        Engine::Replicated(_) => panic!("an engine without replicas"),
    }
}

fn solo_mut(e: &mut Engine) -> &mut SoloEngine {
    match e {
        Engine::Solo(c) => c,
        Engine::Replicated(_) => panic!("an engine without replicas"),
    }
}

fn replicated(e: &Engine) -> &ReplicatedEngine {
    match e {
        Engine::Replicated(c) => c,
        Engine::Solo(_) => panic!("a replicated engine"),
    }
}

/// Two engines; `shm`: through shared memory (rings of `ring` bytes), else TCP only.
fn pair(shm: Option<usize>) -> (Engine, Engine) {
    pair_sc(shm, true)
}

/// [`pair`], with large messages copied once (`process_vm_readv`) or not.
fn pair_sc(shm: Option<usize>, single_copy: bool) -> (Engine, Engine) {
    let key = JobKey::from_bytes([7; p2pmpi_wire::auth::KEY_LEN]);
    let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
    let mut e0 = Engine::new(0, 2, 0, None, key.clone(), Some(l0), addrs.clone(), Duration::ZERO).unwrap();
    let mut e1 = Engine::new(1, 2, 1, None, key, Some(l1), addrs, Duration::ZERO).unwrap();
    for e in [&mut e0, &mut e1] {
        solo_mut(e).shm_policy = ShmPolicy {
            on: shm.is_some(),
            slots: None,
            debug: false,
            ring: shm.unwrap_or(0),
            single_copy,
            sc_min: SINGLE_COPY_MIN,
        };
    }
    (e0, e1)
}

/// Connects the pair: `e0` in a thread (returned), `e1` here.
fn connect(mut e0: Engine, e1: &mut Engine) -> std::thread::JoinHandle<Engine> {
    let t = std::thread::spawn(move || {
        e0.connect_mesh(Duration::from_secs(10)).unwrap();
        e0
    });
    let t0 = Instant::now();
    while e1.connect_mesh(Duration::from_millis(10)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the pair did not connect");
    }
    t
}

/// Two engines of one host talk through shared memory: messages of every protocol, larger
/// than the ring too, arrive whole and in order.
#[test]
fn engines_of_one_host_talk_through_shared_memory() {
    exchange_through_shared_memory(false);
}

/// The same with large messages copied once from the sender's memory (both engines are in
/// this process: the probe and the copies read this process's own memory).
#[test]
fn engines_of_one_host_copy_large_messages_once() {
    let e1 = exchange_through_shared_memory(true);
    // 200 000 B and 1 MiB standard, 100 000 B synchronous.
    assert_eq!(solo(&e1).sc_count, 3);
}

fn exchange_through_shared_memory(single_copy: bool) -> Engine {
    let (e0, mut e1) = pair_sc(Some(shm::MIN_RING), single_copy);
    let mut e0 = connect(e0, &mut e1).join().unwrap();
    assert_eq!((solo(&e0).conns.rings.len(), solo(&e1).conns.rings.len()), (1, 1), "both sides use the rings");
    let sizes = [0usize, 8, 5000, 20_000, 200_000, 1 << 20, 100_000];
    let sender = std::thread::spawn(move || {
        for (k, &n) in sizes.iter().enumerate() {
            let buf: Vec<u8> = (0..n).map(|i| (i * 13 + k) as u8).collect();
            let mode = if k == 6 { SendMode::Synchronous } else { SendMode::Standard };
            let r = e0.isend(0, 1, k as i32, buf.as_ptr(), n, mode).unwrap();
            let t0 = Instant::now();
            while !e0.is_done(r) {
                assert!(t0.elapsed() < Duration::from_secs(20), "send of {n} bytes did not complete");
                e0.progress(Some(1), Some(Duration::from_millis(1)));
            }
            e0.take_done(r).unwrap().unwrap();
        }
        e0
    });
    for (k, &n) in sizes.iter().enumerate() {
        let mut buf = vec![0u8; n + 1];
        let pat = Pattern { comm: 0, src: Some(0), tag: Some(k as i32) };
        let r = e1.irecv(pat, buf.as_mut_ptr(), buf.len()).unwrap();
        let t0 = Instant::now();
        while !e1.is_done(r) {
            assert!(t0.elapsed() < Duration::from_secs(20), "receive of {n} bytes did not complete");
            e1.progress(Some(0), Some(Duration::from_millis(1)));
        }
        let st = e1.take_done(r).unwrap().unwrap();
        assert_eq!(st.len as usize, n);
        assert!(buf[..n].iter().enumerate().all(|(i, b)| *b == (i * 13 + k) as u8), "content of {n} bytes");
    }
    let e0 = sender.join().unwrap();
    assert!(e0.fatal.is_none() && e1.fatal.is_none());
    if !single_copy {
        assert_eq!(solo(&e1).sc_count, 0);
    }
    e1
}

/// A blocking wait keeps its core while it spins on a peer reached through shared memory
/// alone (no yield: under load a yield gives a whole time slice away), and yields on one
/// reached through TCP (the kernel's transmissions may need the core).
#[test]
fn a_wait_on_a_peer_of_rings_only_is_told_apart_from_one_on_tcp() {
    for (shm, want) in [(Some(shm::MIN_RING), true), (None, false)] {
        let (e0, mut e1) = pair(shm);
        let e0 = connect(e0, &mut e1).join().unwrap();
        assert_eq!(e1.hint_on_rings(Some(0)), want, "shm {shm:?}: the wait on rank 0");
        assert_eq!(e0.hint_on_rings(Some(1)), want, "shm {shm:?}: the wait on rank 1");
        // Not a peer: no hint, oneself, out of range.
        for hint in [None, Some(1), Some(2), Some(-1)] {
            assert!(!e1.hint_on_rings(hint), "shm {shm:?}: hint {hint:?}");
        }
    }
}

/// A receiver slower than its sender: one progress call reads a bounded amount and returns,
/// so that a wait whose request completed is not held in the device for as long as the
/// sender keeps sending (found in CI: a barrier's release, read first, was only seen when the
/// sender stopped streaming 30 s later).
#[test]
fn one_progress_call_reads_a_bounded_amount_from_a_streaming_sender() {
    // Over TCP: what the test fills is the kernel's socket buffers (a shared-memory ring
    // holds at most its capacity).
    let (mut e0, mut e1) = pair(None);
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
    let before = solo(&e1).matcher.unexpected_len();
    e1.progress(None, Some(Duration::from_millis(100)));
    let read = solo(&e1).matcher.unexpected_len() - before;
    // What one call may take: the budget, plus what the last read brought in.
    let most = (READ_BUDGET + conn::RBUF) / MSG + 1;
    assert!(read > 0, "nothing read");
    assert!(read <= most, "one progress call queued {read} messages of 64 KiB (at most {most} expected)");
    // What is left is read by the next calls, though no new readiness event comes for it.
    let mut got = solo(&e1).matcher.unexpected_len();
    let t1 = Instant::now();
    while got < want {
        assert!(t1.elapsed() < Duration::from_secs(20), "only {got} of {want} messages arrived");
        e1.progress(None, Some(Duration::from_millis(10)));
        got = solo(&e1).matcher.unexpected_len();
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
}

/// A spawned process (universe id 1, its own world of one) reaches its parent (id 0, which
/// does not know it): the parent learns it once it proved the job key, and messages go both
/// ways. A process with another key claiming a further id is refused and not added.
#[test]
fn a_spawned_process_beyond_the_known_ones_connects_once_it_proves_the_key() {
    let key = JobKey::from_bytes([7; p2pmpi_wire::auth::KEY_LEN]);
    let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a0 = l0.local_addr().unwrap();
    let mut parent = Engine::new(0, 1, 0, None, key.clone(), Some(l0), vec![a0], Duration::ZERO).unwrap();
    let addrs = vec![a0, l1.local_addr().unwrap()];
    let mut child = Engine::new(1, 2, 1, None, key, Some(l1), addrs, Duration::ZERO).unwrap();
    (child.world_base, child.world_size) = (1, 1);
    let child = std::thread::spawn(move || {
        child.connect_mesh(Duration::from_secs(10)).unwrap();
        child.connect_to(&[0], Duration::from_secs(10)).unwrap();
        let v = 42u32.to_le_bytes();
        let r = child.isend(6, 0, 3, v.as_ptr(), 4, SendMode::Standard).unwrap();
        let mut back = [0u8; 4];
        let pat = Pattern { comm: 6, src: Some(0), tag: Some(4) };
        let q = child.irecv(pat, back.as_mut_ptr(), 4).unwrap();
        let t0 = Instant::now();
        while !(child.is_done(r) && child.is_done(q)) {
            assert!(t0.elapsed() < Duration::from_secs(10), "the child's messages did not complete");
            child.progress(None, Some(Duration::from_millis(1)));
        }
        child.take_done(r).unwrap().unwrap();
        child.take_done(q).unwrap().unwrap();
        assert_eq!(u32::from_le_bytes(back), 43);
        child
    });
    parent.grow(2);
    parent.await_connections(&[1], Duration::from_secs(10)).unwrap();
    let mut got = [0u8; 4];
    let pat = Pattern { comm: 6, src: Some(1), tag: Some(3) };
    let q = parent.irecv(pat, got.as_mut_ptr(), 4).unwrap();
    let t0 = Instant::now();
    while !parent.is_done(q) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the child's message did not arrive");
        parent.progress(None, Some(Duration::from_millis(1)));
    }
    parent.take_done(q).unwrap().unwrap();
    assert_eq!(u32::from_le_bytes(got), 42);
    // Sent back on the connection the child opened (the parent never knew its address).
    let v = 43u32.to_le_bytes();
    let r = parent.isend(6, 1, 4, v.as_ptr(), 4, SendMode::Standard).unwrap();
    let child = {
        let t0 = Instant::now();
        while !child.is_finished() {
            assert!(t0.elapsed() < Duration::from_secs(10), "the child did not finish");
            parent.progress(None, Some(Duration::from_millis(1)));
        }
        child.join().unwrap()
    };
    assert!(parent.is_done(r));
    assert!(child.fatal.is_none() && parent.fatal.is_none());

    // Another key, claiming id 5: refused, and the parent does not grow.
    let l5 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut addrs = vec![a0; 6];
    addrs[5] = l5.local_addr().unwrap();
    let other = JobKey::from_bytes([9; p2pmpi_wire::auth::KEY_LEN]);
    let mut forger = Engine::new(5, 6, 5, None, other, Some(l5), addrs, Duration::ZERO).unwrap();
    (forger.world_base, forger.world_size) = (5, 1);
    let forger = std::thread::spawn(move || forger.connect_to(&[0], Duration::from_secs(3)).is_err());
    let t0 = Instant::now();
    while !forger.is_finished() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the forger's opening did not end");
        parent.progress(None, Some(Duration::from_millis(1)));
    }
    assert!(forger.join().unwrap(), "an opening with another key succeeded");
    assert_eq!(solo(&parent).peers.len(), 2, "a process that did not prove the key was added");
    assert!(parent.fatal.is_none());
}

/// A replica holding a backup, waiting for a message of the other rank, reads its own master's
/// commit at once — not on the readiness list's every 64th poll: commits left unread pinned
/// the master's socket pages until this process freed them on its own core, which made R = 2
/// up to 1.6× slower than the same traffic by hand (docs/benchmarks.md, "The slow phases
/// found: commits read late").
#[test]
fn a_replica_waiting_on_another_rank_reads_its_master_s_commits() {
    // -n 2 -r 2: slot 0 rank 0's master, slot 1 its replica, slots 2 and 3 rank 1's.
    let layout = p2pmpi_core::replication::Layout::new(2, 2);
    let key = JobKey::from_bytes([9; p2pmpi_wire::auth::KEY_LEN]);
    let listeners: Vec<_> = (0..4).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let threads: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(slot, l)| {
            let (key, addrs) = (key.clone(), addrs.clone());
            std::thread::spawn(move || {
                let rank = layout.rank_of(slot) as i32;
                let mut e =
                    Engine::new(rank, 2, slot as i32, Some(layout), key, Some(l), addrs, Duration::ZERO).unwrap();
                e.connect_mesh(Duration::from_secs(20)).unwrap();
                e
            })
        })
        .collect();
    let mut e: Vec<Engine> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let backups = |e: &Engine| replicated(e).coord.ep.coordinator().backup_len();
    let buf = vec![3u8; 1024];
    // The replica runs the send first: it keeps a copy until its master commits the message.
    let r1 = e[1].isend(0, 1, 7, buf.as_ptr(), buf.len(), SendMode::Standard).unwrap();
    assert_eq!(backups(&e[1]), 1, "the replica keeps its send");
    // The master transmits it to rank 1's two replicas and commits it to slot 1.
    let r0 = e[0].isend(0, 1, 7, buf.as_ptr(), buf.len(), SendMode::Standard).unwrap();
    let t0 = Instant::now();
    while !(e[0].is_done(r0) && e[0].all_sent()) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the master did not send and commit");
        e[0].progress(None, Some(Duration::from_millis(1)));
    }
    // The replica waits for rank 1 (nothing comes from there), spinning: none of these polls
    // is a 64th, so only a direct read of the master's socket can bring the commit in.
    let mut polls = 0;
    while backups(&e[1]) > 0 && polls < 8 {
        if let Engine::Replicated(c) = &mut e[1] {
            c.tick = 1;
        }
        e[1].progress(Some(1), None);
        polls += 1;
        std::thread::yield_now();
    }
    assert_eq!(backups(&e[1]), 0, "the commit was not read in {polls} polls waiting on rank 1");
    assert!(e[1].is_done(r1));
}

/// The congestion control of a link, or `None` where the kernel does not say.
fn congestion(s: &mio::net::TcpStream) -> Option<String> {
    socket2::SockRef::from(s)
        .tcp_congestion()
        .ok()
        .map(|ca| String::from_utf8_lossy(&ca).trim_end_matches('\0').to_owned())
}

/// Loopback data links never run BBR (see [`conn::tune_loopback_link`]): a link accepted
/// through a listener set to BBR, and any link where BBR is the system's default, is switched
/// to a loss-based algorithm on both ends.
#[test]
fn loopback_data_links_leave_bbr() {
    let (mut e0, mut e1) = pair(None);
    let mut bbr_listeners = true;
    for e in [&e0, &e1] {
        let l = solo(e).io.listener().unwrap();
        bbr_listeners &= socket2::SockRef::from(l).set_tcp_congestion(b"bbr").is_ok();
    }
    if !bbr_listeners {
        // A kernel feature no install brings: skipped even under CI, saying so.
        eprintln!("SKIPPED (kernel feature): this kernel does not offer BBR (tcp_bbr), so no link can run it");
        return;
    }
    let t = connect(e0, &mut e1);
    e0 = t.join().unwrap();
    let mut links = 0;
    for e in [&e0, &e1] {
        for c in solo(e).conns.iter().flatten() {
            let ca = congestion(&c.stream).expect("TCP_CONGESTION of a data link");
            assert!(!ca.starts_with("bbr"), "rank {}: a loopback data link runs {ca}", e.rank);
            links += 1;
        }
    }
    assert_eq!(links, 2, "one link between the two engines, an end in each");
}

/// A replica that cannot follow its master does not exit: its engine's fatal error is set,
/// naming the rank, the replica and the cause, and every later call returns it.
#[test]
fn a_diverged_replica_reports_an_error_instead_of_exiting() {
    // -n 2 -r 2: slot 0 is rank 0's first replica. (A non-master would warm the heap for its
    // copies, which the pool's page-fault test, running alongside, would count.)
    let layout = p2pmpi_core::replication::Layout::new(2, 2);
    let key = JobKey::from_bytes([5; p2pmpi_wire::auth::KEY_LEN]);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![l.local_addr().unwrap(); 4];
    let mut e = Engine::new(0, 2, 0, Some(layout), key, Some(l), addrs, Duration::ZERO).unwrap();
    assert!(e.fatal.is_none());
    match &mut e {
        Engine::Replicated(c) => c.diverged("its master's operation 7 failed where this replica's had succeeded"),
        Engine::Solo(_) => panic!("a replicated engine"),
    }
    let err = e.fatal.clone().expect("the divergence is the engine's fatal error");
    let text = err.to_string();
    assert!(
        matches!(err, crate::error::Error::Protocol { rank: 0, .. })
            && text.contains("replica 0 cannot follow its master"),
        "{text}"
    );
    assert!(text.contains("operation 7 failed"), "the cause is named: {text}");
    let buf = [1u8; 8];
    let sent = e.isend(0, 1, 0, buf.as_ptr(), buf.len(), SendMode::Standard);
    assert_eq!(sent.err(), Some(err), "a later call returns the same error");
}

/// A fault-aware replicated rank (numbered operations) whose master fails a receive at its
/// post — the communicator was revoked, and the master heard it first — while its replica,
/// not told yet, posted the receive: both programs take one path. The master's post gives a
/// request that fails, as the replica's does, so a `sendrecv` goes on to post its send on
/// both, and the replica's send (lent: it completes at its master's commit or with its
/// master's failure) fails like its master's. When the master's post returned the error
/// instead, its program never posted the send, and the replica waited for ever for it (the
/// replicated revoke job of `fault_aware.rs` hung on it in 2 runs of 30).
#[test]
fn a_replica_follows_an_operation_its_master_failed_at_the_post_and_its_lent_send_ends() {
    // -n 2 -r 2: slot 0 rank 0's master, slot 1 its replica. Rank 1's slots are not run:
    // nothing reaches them (the master's posts fail, the replica's send is lent), and the
    // master's frames open the connection to its replica when they go.
    let layout = p2pmpi_core::replication::Layout::new(2, 2);
    let key = JobKey::from_bytes([11; p2pmpi_wire::auth::KEY_LEN]);
    let listeners: Vec<_> = (0..4).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut e: Vec<Engine> = listeners
        .into_iter()
        .take(2)
        .enumerate()
        .map(|(slot, l)| {
            Engine::new(0, 2, slot as i32, Some(layout), key.clone(), Some(l), addrs.clone(), Duration::ZERO).unwrap()
        })
        .collect();
    for en in &mut e {
        match en {
            // The program handles failures (`Policy::Notify`, process-wide, is left alone).
            Engine::Replicated(c) => c.coord.numbered = true,
            Engine::Solo(_) => panic!("a replicated engine"),
        }
    }
    // Context 2's point-to-point communicator.
    const COMM: u32 = 4;
    let out = [5u8; 8];
    // `Coll::sendrecv`'s posts: a receive, then a send; an error at a post ends it there.
    let sendrecv = |e: &mut Engine, inp: &mut [u8; 8]| -> crate::error::Result<(ReqId, ReqId)> {
        let pat = Pattern { comm: COMM, src: Some(1), tag: Some(3) };
        let r = e.irecv(pat, inp.as_mut_ptr(), inp.len())?;
        let s = e.isend(COMM, 1, 3, out.as_ptr(), out.len(), SendMode::Standard)?;
        Ok((r, s))
    };
    let (mut in0, mut in1) = ([0u8; 8], [0u8; 8]);
    // The replica posts both before it hears anything.
    let (r1, s1) = sendrecv(&mut e[1], &mut in1).expect("nothing failed on the replica yet");
    // Its master heard the revocation first, then posts them.
    match &mut e[0] {
        Engine::Replicated(c) => c.revoke(COMM / 2),
        Engine::Solo(_) => panic!("a replicated engine"),
    }
    let master = sendrecv(&mut e[0], &mut in0);
    let t0 = Instant::now();
    while !(e[1].is_done(r1) && e[1].is_done(s1)) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the replica's operations still wait (its lent send: {}) where its master's post gave {:?}",
            if e[1].is_done(s1) { "ended" } else { "waiting for a commit" },
            master.as_ref().map(|_| "requests")
        );
        e[0].progress(None, Some(Duration::from_millis(1)));
        e[1].progress(None, Some(Duration::from_millis(1)));
    }
    let (r0, s0) = master.expect("the master's posts give requests, like its replica's");
    let revoked = Some(Err(crate::error::Error::Revoked));
    for (en, r, s) in [(0, r0, s0), (1, r1, s1)] {
        assert_eq!(e[en].take_done(r), revoked, "slot {en}'s receive");
        assert_eq!(e[en].take_done(s), revoked, "slot {en}'s send");
    }
    assert!(e.iter().all(|en| en.fatal.is_none()), "no replica left");
}

/// A synchronous send to the process itself completes only once a receive takes it, whatever
/// its size (it completed at once: `MPI_Issend` to oneself tested complete before the
/// receive, which `mpi4py.util.pkl5` checks); posted after the receive, it matches at once;
/// a matched probe and a standard send in between keep their order and data.
#[test]
fn a_synchronous_send_to_itself_completes_when_a_receive_takes_it() {
    let (mut e0, _e1) = pair(None);
    let pat = |tag: i32| Pattern { comm: 0, src: Some(0), tag: Some(tag) };
    for (k, &n) in [0usize, 8, 5000, 100_000].iter().enumerate() {
        let tag = k as i32;
        let buf: Vec<u8> = (0..n).map(|i| (i * 7 + k) as u8).collect();
        let s = e0.isend(0, 0, tag, buf.as_ptr(), n, SendMode::Synchronous).unwrap();
        assert!(!e0.is_done(s), "a synchronous send of {n} bytes to itself completed before any receive");
        // A standard send to itself behind it completes at once.
        let other = [9u8; 3];
        let t = e0.isend(0, 0, 100, other.as_ptr(), other.len(), SendMode::Standard).unwrap();
        assert!(e0.is_done(t));
        e0.take_done(t).unwrap().unwrap();
        assert!(!e0.is_done(s));
        let mut out = vec![0u8; n + 1];
        let r = e0.irecv(pat(tag), out.as_mut_ptr(), out.len()).unwrap();
        assert!(e0.is_done(r) && e0.is_done(s), "the receive of {n} bytes took the send: both complete");
        let st = e0.take_done(r).unwrap().unwrap();
        assert_eq!((st.source, st.tag, st.len as usize), (0, tag, n));
        assert_eq!(&out[..n], &buf[..], "content of {n} bytes");
        e0.take_done(s).unwrap().unwrap();
        let mut small = [0u8; 3];
        let r = e0.irecv(pat(100), small.as_mut_ptr(), 3).unwrap();
        e0.take_done(r).unwrap().unwrap();
        assert_eq!(small, other);
    }
    // The receive first: the synchronous send matches it on the spot.
    let mut out = [0u8; 4];
    let r = e0.irecv(pat(7), out.as_mut_ptr(), 4).unwrap();
    assert!(!e0.is_done(r));
    let s = e0.isend(0, 0, 7, [1u8, 2, 3, 4].as_ptr(), 4, SendMode::Synchronous).unwrap();
    assert!(e0.is_done(s) && e0.is_done(r));
    e0.take_done(s).unwrap().unwrap();
    e0.take_done(r).unwrap().unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    // A receive too small for it fails with the truncation; the send still completes.
    let big = [5u8; 16];
    let s = e0.isend(0, 0, 8, big.as_ptr(), 16, SendMode::Synchronous).unwrap();
    let mut out = [0u8; 4];
    let r = e0.irecv(pat(8), out.as_mut_ptr(), 4).unwrap();
    assert!(matches!(e0.take_done(r), Some(Err(crate::error::Error::Truncated { .. }))));
    assert!(e0.is_done(s));
}

/// Over TCP, a frame that completes a receive sends the progress call back to its caller
/// without reading the socket again (that read, which finds nothing in a ping-pong, is a
/// system call on the way of every message); what follows it, already read or still in the
/// kernel, is not left behind: the connection is read again by the next progress call,
/// though no readiness event comes for it (epoll is edge-triggered).
#[test]
fn a_receive_completed_on_a_socket_returns_at_once_and_what_follows_is_read_later() {
    use std::os::fd::AsRawFd;
    let (e0, mut e1) = pair(None);
    let mut e0 = connect(e0, &mut e1).join().unwrap();
    let (a, b) = (7u64.to_le_bytes(), 9u64.to_le_bytes());
    for (tag, m) in [(1, &a), (2, &b)] {
        let r = e0.isend(0, 1, tag, m.as_ptr(), 8, SendMode::Standard).unwrap();
        let t0 = Instant::now();
        while e0.take_done(r).map(Result::unwrap).is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10), "the send of tag {tag} did not complete");
            e0.progress(None, Some(Duration::from_millis(10)));
        }
    }
    // Both frames wait in the receiver's socket.
    let cid = solo(&e1).peers[0].conns[0];
    let fd = solo(&e1).conns[cid].as_ref().unwrap().stream.as_raw_fd();
    let both = 2 * (p2pmpi_wire::HEADER_LEN + 8);
    let t0 = Instant::now();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: `fd` is the connection's open socket; FIONREAD writes one `c_int` there.
        assert_eq!(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued as *mut libc::c_int) }, 0);
        if queued as usize >= both {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "only {queued} of {both} bytes arrived");
        std::thread::yield_now();
    }
    let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
    let rx = e1.irecv(Pattern { comm: 0, src: Some(0), tag: Some(1) }, x.as_mut_ptr(), 8).unwrap();
    let ry = e1.irecv(Pattern { comm: 0, src: Some(0), tag: Some(2) }, y.as_mut_ptr(), 8).unwrap();
    // One round of a wait on rank 0 reads both frames, completes the first receive and
    // returns; the second frame stays buffered, its connection to be read again.
    assert!(e1.progress(Some(0), None), "nothing was read");
    assert!(e1.is_done(rx), "the first receive did not complete");
    assert!(!e1.is_done(ry), "the round went on past the receive it completed");
    assert!(solo(&e1).conns.unread.contains(&cid), "the connection is not to be read again");
    // A progress call that may sleep takes it at once (not after its time-out).
    let t1 = Instant::now();
    while !e1.is_done(ry) {
        assert!(t1.elapsed() < Duration::from_secs(5), "the second frame was left behind");
        e1.progress(None, Some(Duration::from_secs(20)));
    }
    assert!(t1.elapsed() < Duration::from_secs(5), "the second frame waited for the time-out");
    e1.take_done(rx).unwrap().unwrap();
    e1.take_done(ry).unwrap().unwrap();
    assert_eq!((x, y), (a, b));
    // Nothing more buffered or in the socket: a round of the wait finds nothing, and the
    // connection is no longer to be read again.
    assert!(!e1.progress(Some(0), None));
    assert!(!solo(&e1).conns.unread.contains(&cid));
}

/// The scheduling policy of the calling thread.
fn policy() -> libc::c_int {
    // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy; no memory is passed.
    unsafe { libc::sched_getscheduler(0) }
}

/// On a host with more of the job's processes than cores, a waiting non-master sleeps between
/// empty polls, under `SCHED_BATCH`, where a master yields: the masters' round trips do not
/// wait for it, and its polls took their cores' turns (`-r 2` at 1 KiB went from 1.3–1.7× its
/// traffic by hand to about 1.0–1.2×). Not for a while after a rendez-vous announcement (the
/// sender waits for its pull), nor once it took over.
#[test]
fn a_non_master_naps_under_the_batch_policy_until_it_takes_over() {
    // -n 2 -r 2: slot 0 is rank 0's master, slot 1 its replica. Each engine in a thread of
    // its own: the policy is the thread's.
    let layout = p2pmpi_core::replication::Layout::new(2, 2);
    let key = JobKey::from_bytes([6; p2pmpi_wire::auth::KEY_LEN]);
    let run = move |slot: i32| {
        let key = key.clone();
        std::thread::spawn(move || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addrs = vec![l.local_addr().unwrap(); 4];
            let mut e = Engine::new(0, 2, slot, Some(layout), key, Some(l), addrs, Duration::ZERO).unwrap();
            let before = (e.nap(), policy());
            if slot == 1 {
                // A large message's announcement keeps it awake a while: the sender waits
                // for its pull.
                if let Engine::Replicated(c) = &mut e {
                    c.coord.stay_awake();
                }
                assert_eq!(
                    (e.nap(), policy()),
                    (None, libc::SCHED_OTHER),
                    "a non-master that a rendez-vous reached lately does not nap, at the normal policy"
                );
                if let Engine::Replicated(c) = &mut e {
                    c.coord.announced = Instant::now().checked_sub(super::replication::AWAKE_AFTER_RNDV);
                }
                assert_eq!(
                    (e.nap(), policy()),
                    (Some(super::replication::NAP), libc::SCHED_BATCH),
                    "it naps again later"
                );
                // The launcher declares rank 0's master dead: slot 1 takes over.
                e.peer_failed(0);
                e.progress(None, Some(Duration::ZERO));
            }
            (before, (e.nap(), policy()), e.follows())
        })
        .join()
        .unwrap()
    };
    let (master, _, _) = run(0);
    assert_eq!(master, (None, libc::SCHED_OTHER), "a master yields, at the normal policy");
    let (replica, after, follows) = run(1);
    assert_eq!(replica, (Some(super::replication::NAP), libc::SCHED_BATCH), "a non-master naps, as a batch thread");
    assert!(!follows, "slot 1 took over");
    assert_eq!(after, (None, libc::SCHED_OTHER), "the new master yields, at the normal policy again");
}
