//! Point-to-point behaviour checks, written in rsmpi's style: `p2p_checks MODE [ARGS]`.
//! Every mode asserts what it tests; rank 0 prints `OK MODE` at the end. The integration
//! tests run each mode through `p2pmpirun`.
use mpi::point_to_point as p2p;
use mpi::request::{CancelGuard, WaitGuard};
use mpi::traits::*;
use std::io::Write;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if mode == "noinit" {
        // A program that never initializes MPI is not an error.
        println!("no MPI here");
        return;
    }
    if mode == "preinit" {
        // rsmpi's documented panic: a derived datatype used before initialize.
        let _ = Tagged::equivalent_datatype();
        unreachable!();
    }
    if mode == "threads" {
        threads();
        return;
    }
    let mut universe = mpi::initialize().unwrap();
    assert!(mpi::initialize().is_none(), "second initialize must return None");
    let world = universe.world();
    let modes: Vec<&str> = if mode == "all" {
        vec![
            "order",
            "wildcard",
            "probe",
            "immediate",
            "multiple",
            "zero",
            "self",
            "sendrecv",
            "sync",
            "object",
            "datatypes",
            "truncate",
            "values",
        ]
    } else {
        vec![mode.as_str()]
    };
    for m in &modes {
        match *m {
            "order" => order(&world),
            "wildcard" => wildcard(&world),
            "probe" => probe(&world),
            "immediate" => immediate(&world),
            "multiple" => multiple(&world),
            "zero" => zero(&world),
            "self" => self_messages(&world),
            "sendrecv" => sendrecv(&world),
            "sync" => sync(&world),
            "object" => object(&world),
            "datatypes" => datatypes(&world),
            "truncate" => truncate(&world),
            "values" => values(&world),
            "short-fatal" => short_fatal(&world),
            "buffered" => buffered(&mut universe),
            "large" => large(&world),
            "truncate-fatal" => truncate_fatal(&world),
            "exit-early" => exit_early(&world),
            "crash" => crash(&world),
            "abort" => abort(&world),
            "no-finalize" => no_finalize(&world),
            "garbage" => garbage(&world),
            "secret" => secret(&world),
            "env" => env(&world),
            "maxloc" => maxloc(&world),
            "panic" => {
                // Rank 1 panics while the others wait for it in a collective.
                if world.rank() == 1 {
                    panic!("deliberate panic in rank 1");
                }
                world.barrier();
            }
            "drop-request" => {
                // rsmpi's documented panic: a request dropped before it completed.
                let mut x = 0u8;
                mpi::request::scope(|scope| {
                    let r = world.this_process().immediate_receive_into_with_tag(scope, &mut x, 5);
                    drop(r);
                });
            }
            "hang" => {
                // Waits for a message that never comes (for launcher tests).
                let _ = world.any_process().receive::<u8>();
            }
            other => panic!("unknown mode {other}"),
        }
        world.barrier();
        if world.rank() == 0 {
            println!("OK {m}");
        }
    }
}

/// Messages between a pair with the same tag arrive in send order; tags are independent.
fn order(world: &mpi::topology::SimpleCommunicator) {
    let n = 2000;
    if world.size() < 2 {
        return;
    }
    match world.rank() {
        0 => {
            for i in 0..n {
                world.process_at_rank(1).send_with_tag(&(i as u64), (i % 3) as i32);
            }
            // Large and small interleaved on one tag: rendez-vous must not overtake eager.
            for i in 0..20u64 {
                let len = if i % 2 == 0 { 8 } else { 300_000 };
                let v = vec![i; len];
                world.process_at_rank(1).send_with_tag(&v[..], 9);
            }
        }
        1 => {
            let p = world.process_at_rank(0);
            // Receive tag 2 first, then tag 1, then any tag: each stream stays in order.
            let mut last = [None::<u64>; 3];
            for tag in [2, 1] {
                for _ in 0..(0..n).filter(|i| i % 3 == tag).count() {
                    let (v, st) = p.receive_with_tag::<u64>(tag as i32);
                    assert_eq!(st.tag(), tag as i32);
                    assert_eq!(v % 3, tag as u64);
                    if let Some(l) = last[tag] {
                        assert!(v > l, "tag {tag}: {v} after {l}");
                    }
                    last[tag] = Some(v);
                }
            }
            let mut prev = None;
            for _ in 0..(0..n).filter(|i| i % 3 == 0).count() {
                let (v, st) = p.receive::<u64>();
                assert_eq!(st.tag(), 0);
                if let Some(l) = prev {
                    assert!(v > l);
                }
                prev = Some(v);
            }
            for i in 0..20u64 {
                let (v, _) = p.receive_vec_with_tag::<u64>(9);
                assert_eq!(v.len(), if i % 2 == 0 { 8 } else { 300_000 });
                assert!(v.iter().all(|&x| x == i), "message {i} out of order");
            }
        }
        _ => {}
    }
}

/// ANY_SOURCE / ANY_TAG receives get every message once, with a truthful status.
fn wildcard(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let per = 50;
    if rank == 0 {
        let mut seen = vec![0; size as usize];
        for _ in 0..(size - 1) * per {
            let (v, st) = world.any_process().receive::<i32>();
            assert_eq!(v / 1000, st.source_rank(), "payload names its sender");
            assert_eq!(st.tag(), st.source_rank() + 10);
            assert_eq!(v % 1000, seen[st.source_rank() as usize], "per-source order");
            seen[st.source_rank() as usize] += 1;
        }
        assert!(seen[1..].iter().all(|&c| c == per));
        assert!(world.any_process().immediate_probe().is_none(), "nothing left");
    } else {
        for i in 0..per {
            world.process_at_rank(0).send_with_tag(&(rank * 1000 + i), rank + 10);
        }
    }
}

/// probe, immediate_probe, matched_probe and matched receives.
fn probe(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 {
        return;
    }
    match world.rank() {
        0 => {
            let data: Vec<f64> = (0..1000).map(|x| x as f64).collect();
            let p = world.process_at_rank(1);
            p.send_with_tag(&data[..], 4);
            p.send_with_tag(&data[..10], 5);
            p.send_with_tag(&vec![7u8; 200_000][..], 6);
            p.send_with_tag(&42i64, 7);
        }
        1 => {
            let p = world.process_at_rank(0);
            let st = p.probe_with_tag(4);
            assert_eq!(st.tag(), 4);
            assert_eq!(st.source_rank(), 0);
            let n = st.count(f64::equivalent_datatype()) as usize;
            assert_eq!(n, 1000);
            let mut buf = vec![0f64; n];
            let st2 = p.receive_into_with_tag(&mut buf[..], 4);
            assert_eq!(st2.count(f64::equivalent_datatype()), 1000);
            assert_eq!(buf[999], 999.0);
            // matched probe: the message cannot be stolen by another receive
            let (msg, st) = p.matched_probe_with_tag(5);
            assert_eq!(st.count(f64::equivalent_datatype()), 10);
            let (v, _) = (msg, st).matched_receive_vec::<f64>();
            assert_eq!(v.len(), 10);
            // rendez-vous message seen by probe, then received by matched receive
            let (msg, st) = p.matched_probe_with_tag(6);
            assert_eq!(st.count(u8::equivalent_datatype()), 200_000);
            let mut big = vec![0u8; 200_000];
            msg.matched_receive_into(&mut big[..]);
            assert!(big.iter().all(|&b| b == 7));
            let (msg, _) = p.matched_probe();
            let (x, st) = msg.matched_receive::<i64>();
            assert_eq!((x, st.tag()), (42, 7));
            assert!(p.immediate_probe().is_none());
            assert!(p.immediate_matched_probe().is_none());
        }
        _ => {}
    }
}

/// Immediate operations, test loops, guards, cancellation, receive futures.
fn immediate(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 {
        return;
    }
    let rank = world.rank();
    let other = world.process_at_rank(1 - rank.min(1));
    if rank > 1 {
        return;
    }
    let out: Vec<i32> = (0..100_000).map(|i| i * (rank + 1)).collect();
    let mut inp = vec![0i32; 100_000];
    let small_out = [rank; 4];
    let mut small_in = [-1i32; 4];
    mpi::request::scope(|scope| {
        let r1 = other.immediate_receive_into_with_tag(scope, &mut inp[..], 1);
        let r2 = other.immediate_receive_into_with_tag(scope, &mut small_in, 2);
        let s1 = other.immediate_send_with_tag(scope, &out[..], 1);
        let mut s2 = other.immediate_send_with_tag(scope, &small_out, 2);
        loop {
            match s2.test() {
                Ok(_) => break,
                Err(r) => s2 = r,
            }
        }
        let st = r2.wait();
        assert_eq!(st.tag(), 2);
        s1.wait();
        let data = r1.wait_for_data();
        assert_eq!(data[99_999], 99_999 * (2 - rank));
        // a synchronous send held by a WaitGuard
        let _g: WaitGuard<_, _> = other.immediate_synchronous_send_with_tag(scope, &small_out, 3).into();
        let mut v = [0i32; 4];
        other.receive_into_with_tag(&mut v, 3);
        assert_eq!(v, [1 - rank; 4]);
    });
    assert_eq!(small_in, [1 - rank; 4]);
    // cancel a receive that will never match
    let mut never = 0u8;
    let mut never2 = 0u8;
    mpi::request::scope(|scope| {
        let r = other.immediate_receive_into_with_tag(scope, &mut never, 999);
        r.cancel();
        let st = r.wait();
        assert!(st.is_cancelled());
        let _g: CancelGuard<_, _> = other.immediate_receive_into_with_tag(scope, &mut never2, 998).into();
    });
    // receive futures
    let fut = other.immediate_receive_with_tag::<f64>(4);
    world.this_process().send_with_tag(&0u8, 77);
    other.send_with_tag(&(rank as f64 + 0.5), 4);
    let (x, _) = fut.get();
    assert_eq!(x, (1 - rank) as f64 + 0.5);
    let _ = world.this_process().receive_with_tag::<u8>(77);
    let mut fut = other.immediate_receive_with_tag::<u32>(5);
    other.send_with_tag(&7u32, 5);
    let (v, _) = loop {
        match fut.r#try() {
            Ok(v) => break v,
            Err(f) => fut = f,
        }
    };
    assert_eq!(v, 7);
}

/// multiple_scope / RequestCollection and request::wait_any.
fn multiple(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        return;
    }
    if rank == 0 {
        let mut bufs = vec![[0i32; 4]; (size - 1) as usize];
        mpi::request::multiple_scope(bufs.len(), |scope, coll| {
            for (i, b) in bufs.iter_mut().enumerate() {
                coll.add(world.process_at_rank(i as i32 + 1).immediate_receive_into(scope, b));
            }
            let mut got = Vec::new();
            let first = coll.wait_any().expect("one");
            got.push(first.0);
            let mut res = Vec::new();
            while coll.incomplete() > 0 {
                coll.wait_some(&mut res);
                got.extend(res.iter().map(|r| r.0));
            }
            got.sort();
            assert_eq!(got, (0..(size - 1) as usize).collect::<Vec<_>>());
        });
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(*b, [i as i32 + 1; 4]);
        }
        // wait_all and test_all over a second round
        let mut bufs = vec![0i64; (size - 1) as usize];
        mpi::request::multiple_scope(bufs.len(), |scope, coll| {
            for (i, b) in bufs.iter_mut().enumerate() {
                coll.add(world.process_at_rank(i as i32 + 1).immediate_receive_into(scope, b));
            }
            let mut res = Vec::new();
            while !coll.test_all(&mut res) {}
            assert_eq!(res.len(), (size - 1) as usize);
            assert_eq!(coll.incomplete(), 0);
        });
        assert!(bufs.iter().enumerate().all(|(i, &v)| v == 10 * (i as i64 + 1)));
        // request::wait_any over a Vec of synchronous sends
        let x = 5u16;
        mpi::request::scope(|scope| {
            let mut reqs: Vec<_> =
                (1..size).map(|r| world.process_at_rank(r).immediate_synchronous_send(scope, &x)).collect();
            let mut n = 0;
            while let Some((_, _)) = mpi::request::wait_any(&mut reqs) {
                n += 1;
            }
            assert_eq!(n, size - 1);
        });
    } else {
        world.process_at_rank(0).send(&[rank; 4]);
        world.process_at_rank(0).send(&(10 * rank as i64));
        let (v, _) = world.process_at_rank(0).receive::<u16>();
        assert_eq!(v, 5);
    }
}

/// Zero-length messages, with every receive form.
fn zero(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    let other = world.process_at_rank(1 - world.rank());
    let empty: [u8; 0] = [];
    if world.rank() == 0 {
        other.send(&empty);
        other.send(&empty[..]);
        other.synchronous_send(&empty[..]);
        other.send_with_tag(&Vec::<f64>::new()[..], 3);
    } else {
        let mut b = [0u8; 0];
        let st = other.receive_into(&mut b);
        assert_eq!(st.count(u8::equivalent_datatype()), 0);
        let (v, _) = other.receive_vec::<u8>();
        assert!(v.is_empty());
        let mut big = [9u8; 16];
        let st = other.receive_into(&mut big[..]);
        assert_eq!(st.count(u8::equivalent_datatype()), 0);
        assert_eq!(big, [9u8; 16], "nothing written");
        let (v, st) = other.receive_vec_with_tag::<f64>(3);
        assert!(v.is_empty());
        assert_eq!(st.tag(), 3);
    }
}

/// Messages to oneself, small and large.
fn self_messages(world: &mpi::topology::SimpleCommunicator) {
    let me = world.this_process();
    me.send_with_tag(&[1u32, 2, 3], 1);
    let big: Vec<u8> = (0..1_000_000).map(|i| (i % 251) as u8).collect();
    me.send_with_tag(&big[..], 2);
    let (v, st) = me.receive_vec_with_tag::<u8>(2);
    assert_eq!(v, big);
    assert_eq!(st.source_rank(), world.rank());
    let mut a = [0u32; 3];
    me.receive_into_with_tag(&mut a, 1);
    assert_eq!(a, [1, 2, 3]);
    let mut x = 0i32;
    mpi::request::scope(|scope| {
        let r = me.immediate_receive_into_with_tag(scope, &mut x, 5);
        me.send_with_tag(&11i32, 5);
        r.wait();
    });
    assert_eq!(x, 11);
}

/// send_receive and friends in a ring.
fn sendrecv(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let (msg, st): (mpi::Rank, _) = p2p::send_receive(&rank, &next, &prev);
    assert_eq!(msg, (rank + size - 1) % size);
    assert_eq!(st.source_rank(), prev.rank());
    let mut buf = [0i32; 3];
    p2p::send_receive_into(&[rank; 3], &next, &mut buf, &prev);
    assert_eq!(buf, [prev.rank(); 3]);
    let mut x = vec![rank as f64; 200_000];
    p2p::send_receive_replace_into(&mut x[..], &next, &prev);
    assert!(x.iter().all(|&v| v == prev.rank() as f64));
    let (v, st): (u8, _) = p2p::send_receive_with_tags(&(rank as u8), &next, 4, &prev, 4);
    assert_eq!((v as i32, st.tag()), (prev.rank(), 4));
}

/// A synchronous send completes only once the receiver has matched it.
fn sync(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    if world.rank() == 0 {
        let t0 = mpi::time();
        world.process_at_rank(1).synchronous_send(&1u8);
        let dt = mpi::time() - t0;
        assert!(dt >= 0.25, "synchronous send returned after {dt} s, before the receive was posted");
    } else {
        let t0 = mpi::time();
        while mpi::time() - t0 < 0.3 {
            std::hint::spin_loop();
        }
        let (v, _) = world.process_at_rank(0).receive::<u8>();
        assert_eq!(v, 1);
    }
}

#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
struct Job {
    name: String,
    weights: Vec<f32>,
    nested: Option<Box<Job>>,
}

/// serde values (the seeds' OBJECT datatype).
fn object(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    let job = Job {
        name: "π".into(),
        weights: vec![1.5; 50_000],
        nested: Some(Box::new(Job { name: "inner".into(), weights: vec![], nested: None })),
    };
    if world.rank() == 0 {
        world.process_at_rank(1).send_object_with_tag(&job, 8);
    } else {
        let (got, st) = world.process_at_rank(0).receive_object_with_tag::<Job>(8);
        assert_eq!(got, job);
        assert_eq!(st.tag(), 8);
    }
}

/// Strided datatypes through views: gaps stay untouched.
fn datatypes(world: &mpi::topology::SimpleCommunicator) {
    use mpi::datatype::{MutView, UserDatatype, View};
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    let t = UserDatatype::vector(2, 2, 3, &i32::equivalent_datatype());
    if world.rank() == 0 {
        let src = [1, 2, 3, 4, 5, 6];
        // SAFETY: one element of `t` (2 blocks of 2 i32, 3 apart) spans 5 of the 6 i32.
        let v = unsafe { View::with_count_and_datatype(&src[..], 1, &t) };
        world.process_at_rank(1).send(&v);
    } else {
        let mut dst = [-1i32; 6];
        {
            // SAFETY: as for the send; any bytes are valid i32s.
            let mut v = unsafe { MutView::with_count_and_datatype(&mut dst[..], 1, &t) };
            let st = world.process_at_rank(0).receive_into(&mut v);
            assert_eq!(st.count(&t), 1);
        }
        assert_eq!(dst, [1, 2, -1, 4, 5, -1]);
    }
    // pack / unpack
    let ints = [3i32, 1, 4, 1, 5];
    let packed = world.pack(&ints[..]);
    let mut back = [0i32; 5];
    // SAFETY: the bytes were packed from 5 i32, and `back` holds 5 i32.
    unsafe { world.unpack_into(&packed, &mut back[..], 0) };
    assert_eq!(back, ints);
}

/// A receive buffer that is too small is an error, not corrupted memory (eager and
/// rendez-vous); the process continues afterwards.
fn truncate(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    if world.rank() == 0 {
        world.process_at_rank(1).send_with_tag(&[7u8; 100][..], 1);
        world.process_at_rank(1).send_with_tag(&vec![8u8; 500_000][..], 2);
        world.process_at_rank(1).send_with_tag(&5u8, 3);
    } else {
        let p = world.process_at_rank(0);
        let mut small = [0u8; 10];
        match p.try_receive_into_with_tag(&mut small[..], 1) {
            Err(mpi::CommError::Truncated { message_bytes: 100, buffer_bytes: 10, .. }) => {}
            other => panic!("expected truncation, got {other:?}"),
        }
        assert_eq!(small, [0u8; 10], "buffer not written");
        let mut mid = vec![0u8; 1000];
        match p.try_receive_into_with_tag(&mut mid[..], 2) {
            Err(mpi::CommError::Truncated { message_bytes: 500_000, buffer_bytes: 1000, .. }) => {}
            other => panic!("expected truncation, got {other:?}"),
        }
        let (v, _) = p.receive_with_tag::<u8>(3);
        assert_eq!(v, 5, "communication goes on after a truncation");
    }
}

/// A receive of one value gets exactly the value's bytes: a shorter message is an error,
/// never a value partly written; bytes other than 0 and 1 received for a `bool` arrive as
/// `true`; and values of every receive path round-trip.
fn values(world: &mpi::topology::SimpleCommunicator) {
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    if world.rank() == 0 {
        let p = world.process_at_rank(1);
        p.send_with_tag(&[1u8, 2][..], 1); // 2 bytes for a u32
        p.send_with_tag(&[9u8; 8][..], 2); // 8 bytes for a (u32, u64), which has 12
        p.send_with_tag(&[0u8, 1, 2, 255][..], 3);
        p.send_with_tag(&7u8, 4);
        p.send_with_tag(&[5u8, 0][..], 5);
        p.send_with_tag(&0x1234_5678_9abc_def0u64, 6);
        p.send_with_tag(&(3i32, 2.5f64), 7);
        p.send_with_tag(&[2u8, 0, 1][..], 8);
        p.send_with_tag(&-5i16, 9);
    } else {
        let p = world.process_at_rank(0);
        match p.try_receive_with_tag::<u32>(1) {
            Err(mpi::CommError::SizeMismatch { expected: 4, got: 2 }) => {}
            other => panic!("expected a size mismatch, got {other:?}"),
        }
        match p.try_receive_with_tag::<(u32, u64)>(2) {
            Err(mpi::CommError::SizeMismatch { expected: 12, got: 8 }) => {}
            other => panic!("expected a size mismatch, got {other:?}"),
        }
        let mut flags = [false; 4];
        p.receive_into_with_tag(&mut flags[..], 3);
        assert_eq!(flags, [false, true, true, true]);
        assert!(p.receive_with_tag::<bool>(4).0);
        assert_eq!(p.receive_with_tag::<(bool, u8)>(5).0, (true, 0));
        assert_eq!(p.immediate_receive_with_tag::<u64>(6).get().0, 0x1234_5678_9abc_def0);
        let (m, _) = p.matched_probe_with_tag(7);
        assert_eq!(m.matched_receive::<(i32, f64)>().0, (3, 2.5));
        assert_eq!(p.receive_vec_with_tag::<bool>(8).0, [true, false, true]);
        let (v, _): (i16, _) = p2p::send_receive_with_tags(&0u8, &world.this_process(), 10, &p, 9);
        assert_eq!(v, -5);
        let _ = world.this_process().receive_with_tag::<u8>(10);
    }
}

/// A value received by `immediate_receive` from a message too short for it stops the process
/// with a clear message (the plain calls have no error to return).
fn short_fatal(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        world.process_at_rank(1).send(&[1u8, 2][..]);
    } else if world.rank() == 1 {
        let _ = world.process_at_rank(0).immediate_receive::<u32>().get();
        unreachable!("a short value must not be returned");
    }
}

/// The plain receive with a too-small buffer stops the process with a clear message.
fn truncate_fatal(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        world.process_at_rank(1).send(&[1u64; 64][..]);
    } else if world.rank() == 1 {
        let mut small = [0u64; 8];
        world.process_at_rank(0).receive_into(&mut small[..]);
        unreachable!("a truncated receive must not return");
    }
}

/// Buffered sends through an attached buffer.
fn buffered(universe: &mut mpi::environment::Universe) {
    let world = universe.world();
    universe.set_buffer_size(1 << 20);
    assert_eq!(universe.buffer_size(), 1 << 20);
    let me = world.this_process();
    let data = vec![3u16; 1000];
    me.buffered_send_with_tag(&data[..], 1);
    let (v, _) = me.receive_vec_with_tag::<u16>(1);
    assert_eq!(v, data);
    if world.size() >= 2 && world.rank() < 2 {
        let other = world.process_at_rank(1 - world.rank());
        let big = vec![world.rank() as u8; 300_000];
        other.buffered_send_with_tag(&big[..], 2);
        let (v, _) = other.receive_vec_with_tag::<u8>(2);
        assert!(v.iter().all(|&b| b == (1 - world.rank()) as u8) && v.len() == 300_000);
        // Exceeding the attached buffer is an error.
        let huge = vec![0u8; 2 << 20];
        assert!(matches!(other.try_buffered_send_with_tag(&huge[..], 3), Err(mpi::CommError::BufferExhausted { .. })));
    }
    universe.detach_buffer();
    assert_eq!(universe.buffer_size(), 0);
}

/// Very large messages (size in MiB as argument, default 1024): sent 0 → 1 and back.
fn large(world: &mpi::topology::SimpleCommunicator) {
    let mib: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let n = mib << 20;
    if world.size() < 2 || world.rank() > 1 {
        return;
    }
    let other = world.process_at_rank(1 - world.rank());
    let sum = |v: &[u8]| v.iter().step_by(4093).fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    if world.rank() == 0 {
        let mut v = vec![0u8; n];
        for (i, b) in v.iter_mut().enumerate().step_by(4093) {
            *b = (i % 253) as u8;
        }
        let c = sum(&v);
        other.send(&v[..]);
        let mut back = vec![1u8; n];
        other.receive_into(&mut back[..]);
        assert_eq!(sum(&back), c);
        assert_eq!(back[n - 1], v[n - 1]);
        println!("large: {mib} MiB round trip checksum {c:x}");
    } else {
        let (v, st) = other.receive_vec::<u8>();
        assert_eq!(st.count(u8::equivalent_datatype()) as usize, n);
        other.send(&v[..]);
    }
}

/// Rank 1 exits with status 3 after initializing; rank 0 waits for it forever.
fn exit_early(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 1 {
        std::process::exit(3);
    }
    let _ = world.process_at_rank(1).receive::<u8>();
}

/// The last rank kills itself with SIGKILL; the others wait for it.
fn crash(world: &mpi::topology::SimpleCommunicator) {
    let last = world.size() - 1;
    if world.rank() == last {
        std::io::stdout().flush().unwrap();
        kill_self();
    }
    let _ = world.process_at_rank(last).receive::<u8>();
}

fn kill_self() -> ! {
    // Avoid a libc dependency in the example: send ourselves SIGKILL through /bin/kill.
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
    loop {
        std::thread::park();
    }
}

/// Rank 1 calls abort(7).
fn abort(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 1 {
        world.abort(7);
    }
    let _ = world.process_at_rank(1).receive::<u8>();
}

/// Rank 1 returns successfully without dropping the universe.
fn no_finalize(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 1 {
        std::process::exit(0);
    }
    let _ = world.process_at_rank(1).receive::<u8>();
}

/// Sends garbage to this process's own data port, to the launcher's control port and to its
/// failure detector, opens data connections with a wrong key and with a replayed proof, then
/// checks that communication still works.
fn garbage(world: &mpi::topology::SimpleCommunicator) {
    use p2pmpi_wire::auth::JobKey;
    use p2pmpi_wire::{FrameKind, Header, Mid};
    use std::net::TcpStream;
    let addr = mpi::environment::data_address().expect("launched");
    let me = world.rank() as u32;
    let other = (me + 1) % world.size() as u32;
    let hdr = |kind, len| Header::new(kind, Mid { comm: 0, src: other, dst: me, tag: 0, seq: 0 }, len).encode();
    let mut old_hello = Vec::new();
    old_hello.extend_from_slice(b"P2PM");
    old_hello.extend_from_slice(&[1, 1, 0, 0]);
    old_hello.extend_from_slice(&[0u8; 24]);
    old_hello.extend_from_slice(&8u64.to_le_bytes());
    old_hello.extend_from_slice(&[0xAB; 8]);
    let mut oversized = old_hello.clone();
    oversized[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
    // An eager message before any opening.
    let mut eager = hdr(FrameKind::Eager, 4).to_vec();
    eager.extend_from_slice(b"evil");
    let payloads: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect(),
        old_hello,
        oversized,
        vec![0u8; 39],
        eager,
    ];
    for p in &payloads {
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.write_all(p);
        }
    }
    // Openings that claim to be another rank, forged by a thread while this one keeps the
    // engine going (it answers openings only from inside MPI calls).
    struct Done(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Done(done.clone());
    let forger = std::thread::spawn(move || {
        let _flag = flag;
        forge_openings(addr, me, other);
    });
    loop {
        let mine = done.load(std::sync::atomic::Ordering::SeqCst) as i32;
        let mut all = 0;
        world.all_reduce_into(&mine, &mut all, mpi::collective::SystemOperation::min());
        if all == 1 {
            break;
        }
    }
    forger.join().expect("forged openings refused");
    if let Ok(ctrl) = std::env::var("P2PMPI_CONTROL") {
        if let Ok(mut s) = TcpStream::connect(&ctrl) {
            let _ = s.write_all(&[0xff; 64]);
        }
        // A registration for this very slot made with a wrong key: the launcher's answer
        // proves the real key, the registration is refused, and this process goes on.
        let mut s = TcpStream::connect(&ctrl).expect("control port");
        let reg = p2pmpi_wire::control::Registration {
            rank: me,
            data_addr: "127.0.0.1:9".into(),
            pid: 1,
            fd_addr: String::new(),
            tolerant: false,
        };
        let wrong = JobKey::from_bytes([0xAB; 32]);
        let e = p2pmpi_wire::control::register(&mut s, &wrong, &reg)
            .expect_err("the launcher's proof holds only for the real key");
        assert!(e.to_string().contains("does not prove the job key"), "{e}");
        // The same opening played by hand, with a made-up proof: refused, the connection closed.
        let mut s = TcpStream::connect(&ctrl).expect("control port");
        use p2pmpi_wire::control::{read_msg, write_msg, Control};
        write_msg(&mut s, &Control::Hello { rank: me, nonce: [7; 32], version: p2pmpi_wire::control::CONTROL_VERSION })
            .unwrap();
        let Ok(Some(Control::Challenge { .. })) = read_msg(&mut s) else { panic!("no Challenge") };
        write_msg(
            &mut s,
            &Control::Register {
                rank: me,
                data_addr: reg.data_addr.clone(),
                pid: 1,
                fd_addr: String::new(),
                tolerant: false,
                proof: [0xAB; 32],
            },
        )
        .unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        assert!(matches!(read_msg(&mut s), Ok(None) | Err(_)), "a forged registration was answered");
    }
    // Detector datagrams with a MAC made with another key, and garbage: dropped.
    if let Some(fd) = mpi::failure::detector_address() {
        let before = mpi::failure::dropped_datagrams();
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut forged = b"PFD\x02".to_vec();
        forged.extend_from_slice(&other.to_le_bytes());
        forged.extend_from_slice(&[1, 5]);
        let mac = JobKey::from_bytes([0xAB; 32]).datagram_mac(&forged);
        forged.extend_from_slice(&mac);
        for _ in 0..5 {
            u.send_to(&forged, fd).unwrap();
            u.send_to(b"PFD\x02garbage-without-a-mac", fd).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while mpi::failure::dropped_datagrams() < before + 10 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(mpi::failure::dropped_datagrams() >= before + 10, "forged datagrams were not dropped");
        println!("rank {me}: forged detector datagrams dropped");
    }
    // Normal traffic still flows.
    sendrecv(world);
    order(world);
    assert!(mpi::failure::failed_ranks().is_empty());
}

/// Opens data connections to `addr` (slot `me`) claiming to be slot `other`: the acceptor's
/// answer proves the real key; a proof made with a wrong key, and a proof of the real key
/// made for another opening (what replaying a captured opening sends), are both refused.
fn forge_openings(addr: std::net::SocketAddr, me: u32, other: u32) {
    use p2pmpi_wire::auth::{self, JobKey, Role};
    use p2pmpi_wire::{FrameKind, Header, Mid};
    use std::io::Read;
    use std::net::TcpStream;
    let hdr = |kind, len| Header::new(kind, Mid { comm: 0, src: other, dst: me, tag: 0, seq: 0 }, len).encode();
    let key = JobKey::from_hex(&std::env::var("P2PMPI_JOB_KEY").expect("launched")).expect("a job key");
    for forged in ["wrong key", "replay"] {
        let mut s = TcpStream::connect(addr).expect("data port");
        let nc = auth::nonce();
        let mut hello = hdr(FrameKind::Hello, auth::NONCE_LEN as u64).to_vec();
        hello.extend_from_slice(&nc);
        s.write_all(&hello).unwrap();
        let mut ch = [0u8; 40 + 64];
        s.read_exact(&mut ch).expect("a Challenge");
        let na: auth::Nonce = ch[40..72].try_into().unwrap();
        assert!(auth::verify_data_proof(&key, Role::DataAcceptor, other, me, &nc, &na, &ch[72..]), "acceptor's proof");
        let proof = match forged {
            "wrong key" => auth::data_proof(&JobKey::from_bytes([0xAB; 32]), Role::DataConnector, other, me, &nc, &na),
            _ => auth::data_proof(&key, Role::DataConnector, other, me, &nc, &auth::nonce()),
        };
        let mut a = hdr(FrameKind::Auth, auth::PROOF_LEN as u64).to_vec();
        a.extend_from_slice(&proof);
        let mut m = hdr(FrameKind::Eager, 4).to_vec();
        m.extend_from_slice(b"evil");
        a.extend_from_slice(&m);
        let _ = s.write_all(&a);
        // The process closes the connection: read until the end (bounded).
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        let closed = s.read_to_end(&mut rest);
        assert!(
            closed.is_ok() || closed.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{forged}: {closed:?}"
        );
        assert!(rest.is_empty(), "{forged}: the process answered a forged opening");
    }
}

/// Rank 0 sends every other rank a recognisable text, eager and rendez-vous (the capture
/// tests look for it on the wire); the receivers check it without printing it.
fn secret(world: &mpi::topology::SimpleCommunicator) {
    let text = b"a-recognisable-payload-SECRET-0123456789".repeat(8);
    let big = text.repeat(8 * 1024); // 2.5 MiB: rendez-vous
    if world.rank() == 0 {
        for r in 1..world.size() {
            world.process_at_rank(r).send(&text[..]);
            world.process_at_rank(r).send(&big[..]);
        }
    } else {
        let (got, _) = world.process_at_rank(0).receive_vec::<u8>();
        assert_eq!(got, text);
        let (got, _) = world.process_at_rank(0).receive_vec::<u8>();
        assert_eq!(got, big);
    }
}

/// Prints processor name, version and time (for the docs).
fn env(world: &mpi::topology::SimpleCommunicator) {
    if world.rank() == 0 {
        let (v, sv) = mpi::environment::version();
        println!(
            "{} on {} (MPI {v}.{sv}), threading {:?}, t={:.3}",
            mpi::environment::library_version().unwrap(),
            mpi::environment::processor_name().unwrap(),
            mpi::environment::threading_support(),
            mpi::time()
        );
        assert_eq!(world.get_name(), "MPI_COMM_WORLD");
    }
}

#[derive(Equivalence, Clone, Copy)]
struct Tagged {
    id: u32,
    weight: f64,
}

/// Threading::Multiple: four threads per process exchange messages concurrently, each on its
/// own tag, with blocking and immediate operations.
fn threads() {
    let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap();
    assert_eq!(level, mpi::Threading::Multiple);
    assert_eq!(mpi::environment::threading_support(), mpi::Threading::Multiple);
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    std::thread::scope(|ts| {
        for t in 0..4 {
            let world = &world;
            ts.spawn(move || {
                let next = world.process_at_rank((rank + 1) % size);
                let prev = world.process_at_rank((rank + size - 1) % size);
                for i in 0..500 {
                    let v = Tagged { id: (rank * 1000 + i) as u32, weight: t as f64 };
                    let mut got = Tagged { id: 0, weight: -1.0 };
                    mpi::request::scope(|scope| {
                        let r = prev.immediate_receive_into_with_tag(scope, &mut got, t);
                        next.send_with_tag(&v, t);
                        r.wait();
                    });
                    assert_eq!(got.id as i32, ((rank + size - 1) % size) * 1000 + i);
                    assert_eq!(got.weight, t as f64);
                }
            });
        }
    });
    world.barrier();
    if rank == 0 {
        println!("OK threads");
    }
}

/// MAXLOC / MINLOC on (value, index) pairs: the seeds' pair types.
fn maxloc(world: &mpi::topology::SimpleCommunicator) {
    use mpi::collective::SystemOperation;
    let (rank, size) = (world.rank(), world.size());
    // Values with a tie between the two highest ranks: the smallest index must win.
    let value = if rank >= size - 2 { 100.0 } else { rank as f64 };
    let mut best = (0.0f64, 0i32);
    world.all_reduce_into(&(value, rank), &mut best, SystemOperation::max_loc());
    assert_eq!(best, (100.0, (size - 2).max(0)));
    let mut worst = (0i64, 0i32);
    world.all_reduce_into(&(-(rank as i64) * 3, rank), &mut worst, SystemOperation::min_loc());
    assert_eq!(worst, (-(size as i64 - 1) * 3, size - 1));
}
