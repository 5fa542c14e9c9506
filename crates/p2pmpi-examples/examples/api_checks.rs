//! Behaviour checks of the rest of rsmpi's API, written in rsmpi's style: immediate
//! collectives (results against the sequential reference, several in flight at once,
//! progress while blocked in other calls, `test` loops, scopes and request collections),
//! Cartesian topologies, communicator attributes, `UnsafeUserOperation` and `DynBufferMut`.
//!
//! `api_checks [PART...]` runs the named parts (`immediate`, `progress`, `cartesian`,
//! `attributes`, `unsafe_op`, `dyn_buffer`), all of them by default. Every rank checks its own
//! results and panics on the first wrong one (naming the check); rank 0 prints
//! `OK api_checks n=<size> <parts>` at the end.
use mpi::collective::{SystemOperation, UserOperation};
use mpi::datatype::{Partition, PartitionMut};
use mpi::request;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::{Count, Rank};

/// Rank r's value number i.
fn val(r: Rank, i: usize) -> i32 {
    100 * r + i as i32 + 1
}

fn immediate(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let nu = n as usize;

    // Barrier.
    world.immediate_barrier().wait();

    // Broadcast from every root, in a test loop.
    for root in 0..n {
        // A request in the static scope needs a buffer that lives for ever: leaked on purpose.
        let init: Vec<i32> = if me == root { (0..5).map(|i| val(root, i)).collect() } else { vec![0; 5] };
        let buf: &'static mut [i32] = Box::leak(init.into_boxed_slice());
        let mut req = world.process_at_rank(root).immediate_broadcast_into(request::StaticScope, buf);
        let got = loop {
            match req.test_with_data() {
                Ok((_, data)) => break data,
                Err(r) => req = r,
            }
        };
        assert_eq!(got.to_vec(), (0..5).map(|i| val(root, i)).collect::<Vec<_>>(), "immediate_broadcast_into root {root}");
    }

    {
        // all_gather
        let mine = [val(me, 0), val(me, 1)];
        let mut all = vec![0i32; 2 * nu];
        request::scope(|scope| { world.immediate_all_gather_into(scope, &mine[..], &mut all[..]).wait(); });
        let want: Vec<i32> = (0..n).flat_map(|r| [val(r, 0), val(r, 1)]).collect();
        assert_eq!(all, want, "immediate_all_gather_into");

        // all_gather_varcount: rank r contributes r + 1 values, parts in reverse order with gaps.
        let counts: Vec<Count> = (0..n).map(|r| r + 1).collect();
        let mut displs = vec![0 as Count; nu];
        let mut at = 0;
        for r in (0..nu).rev() {
            displs[r] = at;
            at += counts[r] + 1;
        }
        let mine: Vec<i32> = (0..=me as usize).map(|i| val(me, i)).collect();
        let mut buf = vec![-1i32; at as usize];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            request::scope(|scope| { world.immediate_all_gather_varcount_into(scope, &mine[..], &mut part).wait(); });
        }
        let mut want = vec![-1i32; at as usize];
        for r in 0..n {
            for i in 0..=r as usize {
                want[displs[r as usize] as usize + i] = val(r, i);
            }
        }
        assert_eq!(buf, want, "immediate_all_gather_varcount_into");

        // all_to_all: block j of rank i is 1000 i + j.
        let send: Vec<i32> = (0..n).map(|j| 1000 * me + j).collect();
        let mut recv = vec![0i32; nu];
        request::scope(|scope| { world.immediate_all_to_all_into(scope, &send[..], &mut recv[..]).wait(); });
        assert_eq!(recv, (0..n).map(|i| 1000 * i + me).collect::<Vec<_>>(), "immediate_all_to_all_into");

        // all_to_all_varcount: rank i sends j + 1 copies of (i, j) to rank j.
        let scounts: Vec<Count> = (0..n).map(|j| j + 1).collect();
        let sdispls: Vec<Count> = scounts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
        let send: Vec<i32> = (0..n).flat_map(|j| std::iter::repeat_n(10 * me + j, j as usize + 1)).collect();
        let rcounts: Vec<Count> = vec![me + 1; nu];
        let rdispls: Vec<Count> = (0..n).map(|i| i * (me + 1)).collect();
        let mut recv = vec![0i32; nu * (me as usize + 1)];
        {
            let sp = Partition::new(&send[..], &scounts[..], &sdispls[..]);
            let mut rp = PartitionMut::new(&mut recv[..], &rcounts[..], &rdispls[..]);
            request::scope(|scope| { world.immediate_all_to_all_varcount_into(scope, &sp, &mut rp).wait(); });
        }
        let want: Vec<i32> = (0..n).flat_map(|i| std::iter::repeat_n(10 * i + me, me as usize + 1)).collect();
        assert_eq!(recv, want, "immediate_all_to_all_varcount_into");

        // all_reduce (sum, max) and a non-commutative user operation (rank order matters).
        let x = [me + 1, 7 - me];
        let mut s = [0i32; 2];
        request::scope(|scope| { world.immediate_all_reduce_into(scope, &x[..], &mut s[..], SystemOperation::sum()).wait(); });
        let tri = n * (n + 1) / 2;
        assert_eq!(s, [tri, 7 * n - n * (n - 1) / 2], "immediate_all_reduce_into sum");
        let mut m = 0i32;
        request::scope(|scope| { world.immediate_all_reduce_into(scope, &me, &mut m, SystemOperation::max()).wait(); });
        assert_eq!(m, n - 1, "immediate_all_reduce_into max");
        // Composition of digits: acc = 10 · left + right (associative on (value, 10^len) pairs).
        let concat = UserOperation::associative(|a, b| {
            let a: &[i64] = a.downcast().unwrap();
            let b: &mut [i64] = b.downcast().unwrap();
            b[0] = a[0] * b[1] + b[0];
            b[1] *= a[1];
        });
        let digit = [me as i64 + 1, 10i64];
        let mut out = [0i64; 2];
        request::scope(|scope| { world.immediate_all_reduce_into(scope, &digit[..], &mut out[..], &concat).wait(); });
        let want: i64 = (1..=n as i64).fold(0, |acc, d| acc * 10 + d);
        assert_eq!(out[0], want, "immediate_all_reduce_into with a non-commutative operation");

        // reduce_scatter_block: rank i gets sum over ranks r of (r + i).
        let send: Vec<i32> = (0..n).map(|i| me + i).collect();
        let mut got = 0i32;
        request::scope(|scope| { world.immediate_reduce_scatter_block_into(scope, &send[..], &mut got, SystemOperation::sum()).wait(); });
        assert_eq!(got, n * (n - 1) / 2 + n * me, "immediate_reduce_scatter_block_into");

        // scan and exclusive scan; with the non-commutative operation too.
        let mine1 = me + 1;
        let mut sc = 0i32;
        request::scope(|scope| { world.immediate_scan_into(scope, &mine1, &mut sc, SystemOperation::sum()).wait(); });
        assert_eq!(sc, (me + 1) * (me + 2) / 2, "immediate_scan_into");
        let mut out = [0i64; 2];
        request::scope(|scope| { world.immediate_scan_into(scope, &digit[..], &mut out[..], &concat).wait(); });
        assert_eq!(out[0], (1..=me as i64 + 1).fold(0, |a, d| a * 10 + d), "immediate_scan_into (order)");
        let mut ex = -5i32;
        request::scope(|scope| { world.immediate_exclusive_scan_into(scope, &mine1, &mut ex, SystemOperation::sum()).wait(); });
        let want = if me == 0 { -5 } else { me * (me + 1) / 2 };
        assert_eq!(ex, want, "immediate_exclusive_scan_into (rank 0 untouched)");

        // Rooted collectives, every root.
        for root in 0..n {
            let rp = world.process_at_rank(root);
            let mine = [val(me, 0), val(me, 1)];
            if me == root {
                let mut all = vec![0i32; 2 * nu];
                request::scope(|scope| { rp.immediate_gather_into_root(scope, &mine[..], &mut all[..]).wait(); });
                let want: Vec<i32> = (0..n).flat_map(|r| [val(r, 0), val(r, 1)]).collect();
                assert_eq!(all, want, "immediate_gather_into_root root {root}");
            } else {
                request::scope(|scope| { rp.immediate_gather_into(scope, &mine[..]).wait(); });
            }

            let mine: Vec<i32> = (0..=me as usize).map(|i| val(me, i)).collect();
            if me == root {
                let counts: Vec<Count> = (0..n).map(|r| r + 1).collect();
                let displs: Vec<Count> = counts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
                let mut buf = vec![0i32; (n * (n + 1) / 2) as usize];
                {
                    let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
                    request::scope(|scope| { rp.immediate_gather_varcount_into_root(scope, &mine[..], &mut part).wait(); });
                }
                let want: Vec<i32> = (0..n).flat_map(|r| (0..=r as usize).map(move |i| val(r, i))).collect();
                assert_eq!(buf, want, "immediate_gather_varcount_into_root root {root}");
            } else {
                request::scope(|scope| { rp.immediate_gather_varcount_into(scope, &mine[..]).wait(); });
            }

            let mut got = [0i32; 2];
            if me == root {
                let all: Vec<i32> = (0..n).flat_map(|r| [val(r, 0), val(r, 1)]).collect();
                request::scope(|scope| { rp.immediate_scatter_into_root(scope, &all[..], &mut got[..]).wait(); });
            } else {
                request::scope(|scope| { rp.immediate_scatter_into(scope, &mut got[..]).wait(); });
            }
            assert_eq!(got, [val(me, 0), val(me, 1)], "immediate_scatter_into root {root}");

            let mut got = vec![0i32; me as usize + 1];
            if me == root {
                let counts: Vec<Count> = (0..n).map(|r| r + 1).collect();
                let displs: Vec<Count> = counts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
                let all: Vec<i32> = (0..n).flat_map(|r| (0..=r as usize).map(move |i| val(r, i))).collect();
                let part = Partition::new(&all[..], &counts[..], &displs[..]);
                request::scope(|scope| { rp.immediate_scatter_varcount_into_root(scope, &part, &mut got[..]).wait(); });
            } else {
                request::scope(|scope| { rp.immediate_scatter_varcount_into(scope, &mut got[..]).wait(); });
            }
            assert_eq!(got, (0..=me as usize).map(|i| val(me, i)).collect::<Vec<_>>(), "immediate_scatter_varcount");

            if me == root {
                let mut out = [0i64; 2];
                request::scope(|scope| { rp.immediate_reduce_into_root(scope, &digit[..], &mut out[..], &concat).wait(); });
                assert_eq!(out[0], (1..=n as i64).fold(0, |a, d| a * 10 + d), "immediate_reduce_into_root {root}");
            } else {
                request::scope(|scope| { rp.immediate_reduce_into(scope, &digit[..], &concat).wait(); });
            }
        }
    }

    // Several in flight at once, completed in reverse order, in a request collection.
    let a = [me; 3];
    let mut outs = vec![[0i32; 3]; 4];
    mpi::request::multiple_scope(4, |scope, coll| {
        let mut rest = &mut outs[..];
        for k in 0..4 {
            let (head, tail) = rest.split_first_mut().unwrap();
            rest = tail;
            let op = if k % 2 == 0 { SystemOperation::sum() } else { SystemOperation::max() };
            coll.add(world.immediate_all_reduce_into(scope, &a[..], &mut head[..], op));
        }
        let mut done = Vec::new();
        coll.wait_all(&mut done);
        assert_eq!(done.len(), 4);
    });
    for (k, o) in outs.iter().enumerate() {
        let want = if k % 2 == 0 { n * (n - 1) / 2 } else { n - 1 };
        assert_eq!(o, &[want; 3], "concurrent immediate_all_reduce_into #{k}");
    }
}

/// An immediate collective moves on while its process blocks in another call: rank 0 starts a
/// barrier whose later rounds only it can send (dissemination: with 3 or more processes the
/// second round is posted when the first is over), then blocks in a receive from the last
/// rank, which sends only once its own barrier completed. Without progress inside rank 0's
/// receive, this deadlocks (the test's time-out fails it). Same with a broadcast on 4 or more
/// processes, whose binomial tree has rank 2 forward to rank 3.
fn progress(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let last = n - 1;
    let barrier = world.immediate_barrier();
    if n > 1 && me == 0 {
        let (v, _) = world.process_at_rank(last).receive::<i32>();
        assert_eq!(v, 77, "message sent after the barrier");
        barrier.wait();
    } else if n > 1 && me == last {
        barrier.wait();
        world.process_at_rank(0).send(&77i32);
    } else {
        barrier.wait();
    }
    if n >= 4 {
        let mut x = if me == 0 { [5i32, 6, 7] } else { [0; 3] };
        request::scope(|scope| {
            let req = world.process_at_rank(0).immediate_broadcast_into(scope, &mut x[..]);
            if me == 2 {
                // Rank 3's copy comes from this process, which is blocked here.
                let (v, _) = world.process_at_rank(3).receive::<i32>();
                assert_eq!(v, 18, "rank 3 had the broadcast data");
            }
            req.wait();
        });
        assert_eq!(x, [5, 6, 7], "immediate_broadcast_into forwarded while blocked");
        if me == 3 {
            world.process_at_rank(2).send(&x.iter().sum::<i32>());
        }
    }
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = ["immediate", "progress", "cartesian", "attributes", "unsafe_op", "dyn_buffer"];
    let parts: Vec<&str> = if args.is_empty() { all.to_vec() } else { args.iter().map(String::as_str).collect() };
    for p in &parts {
        match *p {
            "immediate" => immediate(&world),
            "progress" => progress(&world),
            other => panic!("unknown part {other}"),
        }
    }
    world.barrier();
    if world.rank() == 0 {
        println!("OK api_checks n={} {}", world.size(), parts.join(" "));
    }
}
