//! Behaviour checks of the rest of rsmpi's API, written in rsmpi's style: immediate
//! collectives (results against the sequential reference, several in flight at once,
//! progress while blocked in other calls, `test` loops, scopes and request collections),
//! Cartesian topologies, communicator attributes, `UnsafeUserOperation` and `DynBufferMut`.
//!
//! `api_checks [PART...]` runs the named parts (`immediate`, `progress`, `cartesian`,
//! `attributes`, `unsafe_op`, `dyn_buffer`), all of them by default. Every rank checks its own
//! results and panics on the first wrong one (naming the check); rank 0 prints
//! `OK api_checks n=<size> <parts>` at the end.
use mpi::collective::{SystemOperation, UnsafeUserOperation, UserOperation};
use mpi::datatype::{DynBuffer, DynBufferMut, Partition, PartitionMut};
use mpi::ffi::MPI_Datatype;
use mpi::request;
use mpi::topology::{CartesianLayout, SimpleCommunicator};
use mpi::traits::*;
use mpi::{Count, Rank};
use std::os::raw::{c_int, c_void};

/// Rank r's value number i.
fn val(r: Rank, i: usize) -> i32 {
    100 * r + i as i32 + 1
}

/// The immediate collectives: every family against its sequential reference, then several
/// in flight at once.
fn immediate(world: &SimpleCommunicator) {
    immediate_broadcasts(world);
    immediate_gathers_and_all_to_all(world);
    // Composition of digits: acc = 10 · left + right (associative on (value, 10^len) pairs).
    let concat = UserOperation::associative(|a, b| {
        let a: &[i64] = a.downcast().unwrap();
        let b: &mut [i64] = b.downcast().unwrap();
        b[0] += a[0] * b[1];
        b[1] *= a[1];
    });
    immediate_reductions(world, &concat);
    immediate_rooted(world, &concat);
    immediate_in_flight(world);
}

/// `immediate_barrier`, and `immediate_broadcast_into` from every root in a `test` loop.
fn immediate_broadcasts(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
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
        assert_eq!(
            got.to_vec(),
            (0..5).map(|i| val(root, i)).collect::<Vec<_>>(),
            "immediate_broadcast_into root {root}"
        );
    }
}

/// `immediate_all_gather`, `immediate_all_to_all` and their varcount forms.
fn immediate_gathers_and_all_to_all(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let nu = n as usize;
    // all_gather
    let mine = [val(me, 0), val(me, 1)];
    let mut all = vec![0i32; 2 * nu];
    request::scope(|scope| {
        world.immediate_all_gather_into(scope, &mine[..], &mut all[..]).wait();
    });
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
        request::scope(|scope| {
            world.immediate_all_gather_varcount_into(scope, &mine[..], &mut part).wait();
        });
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
    request::scope(|scope| {
        world.immediate_all_to_all_into(scope, &send[..], &mut recv[..]).wait();
    });
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
        request::scope(|scope| {
            world.immediate_all_to_all_varcount_into(scope, &sp, &mut rp).wait();
        });
    }
    let want: Vec<i32> = (0..n).flat_map(|i| std::iter::repeat_n(10 * i + me, me as usize + 1)).collect();
    assert_eq!(recv, want, "immediate_all_to_all_varcount_into");
}

/// `immediate_all_reduce`, `immediate_reduce_scatter_block` and the scans, with a
/// non-commutative user operation too.
fn immediate_reductions(world: &SimpleCommunicator, concat: &UserOperation<'_>) {
    let n = world.size();
    let me = world.rank();
    // all_reduce (sum, max) and a non-commutative user operation (rank order matters).
    let x = [me + 1, 7 - me];
    let mut s = [0i32; 2];
    request::scope(|scope| {
        world.immediate_all_reduce_into(scope, &x[..], &mut s[..], SystemOperation::sum()).wait();
    });
    let tri = n * (n + 1) / 2;
    assert_eq!(s, [tri, 7 * n - n * (n - 1) / 2], "immediate_all_reduce_into sum");
    let mut m = 0i32;
    request::scope(|scope| {
        world.immediate_all_reduce_into(scope, &me, &mut m, SystemOperation::max()).wait();
    });
    assert_eq!(m, n - 1, "immediate_all_reduce_into max");
    let digit = [me as i64 + 1, 10i64];
    let mut out = [0i64; 2];
    request::scope(|scope| {
        world.immediate_all_reduce_into(scope, &digit[..], &mut out[..], concat).wait();
    });
    let want: i64 = (1..=n as i64).fold(0, |acc, d| acc * 10 + d);
    assert_eq!(out[0], want, "immediate_all_reduce_into with a non-commutative operation");

    // reduce_scatter_block: rank i gets sum over ranks r of (r + i).
    let send: Vec<i32> = (0..n).map(|i| me + i).collect();
    let mut got = 0i32;
    request::scope(|scope| {
        world.immediate_reduce_scatter_block_into(scope, &send[..], &mut got, SystemOperation::sum()).wait();
    });
    assert_eq!(got, n * (n - 1) / 2 + n * me, "immediate_reduce_scatter_block_into");

    // scan and exclusive scan; with the non-commutative operation too.
    let mine1 = me + 1;
    let mut sc = 0i32;
    request::scope(|scope| {
        world.immediate_scan_into(scope, &mine1, &mut sc, SystemOperation::sum()).wait();
    });
    assert_eq!(sc, (me + 1) * (me + 2) / 2, "immediate_scan_into");
    let mut out = [0i64; 2];
    request::scope(|scope| {
        world.immediate_scan_into(scope, &digit[..], &mut out[..], concat).wait();
    });
    assert_eq!(out[0], (1..=me as i64 + 1).fold(0, |a, d| a * 10 + d), "immediate_scan_into (order)");
    let mut ex = -5i32;
    request::scope(|scope| {
        world.immediate_exclusive_scan_into(scope, &mine1, &mut ex, SystemOperation::sum()).wait();
    });
    let want = if me == 0 { -5 } else { me * (me + 1) / 2 };
    assert_eq!(ex, want, "immediate_exclusive_scan_into (rank 0 untouched)");
}

/// The rooted immediate collectives (gather, scatter, their varcount forms, reduce) from every root.
fn immediate_rooted(world: &SimpleCommunicator, concat: &UserOperation<'_>) {
    let n = world.size();
    let me = world.rank();
    let nu = n as usize;
    let digit = [me as i64 + 1, 10i64];
    // Rooted collectives, every root.
    for root in 0..n {
        let rp = world.process_at_rank(root);
        let mine = [val(me, 0), val(me, 1)];
        if me == root {
            let mut all = vec![0i32; 2 * nu];
            request::scope(|scope| {
                rp.immediate_gather_into_root(scope, &mine[..], &mut all[..]).wait();
            });
            let want: Vec<i32> = (0..n).flat_map(|r| [val(r, 0), val(r, 1)]).collect();
            assert_eq!(all, want, "immediate_gather_into_root root {root}");
        } else {
            request::scope(|scope| {
                rp.immediate_gather_into(scope, &mine[..]).wait();
            });
        }

        let mine: Vec<i32> = (0..=me as usize).map(|i| val(me, i)).collect();
        if me == root {
            let counts: Vec<Count> = (0..n).map(|r| r + 1).collect();
            let displs: Vec<Count> = counts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
            let mut buf = vec![0i32; (n * (n + 1) / 2) as usize];
            {
                let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
                request::scope(|scope| {
                    rp.immediate_gather_varcount_into_root(scope, &mine[..], &mut part).wait();
                });
            }
            let want: Vec<i32> = (0..n).flat_map(|r| (0..=r as usize).map(move |i| val(r, i))).collect();
            assert_eq!(buf, want, "immediate_gather_varcount_into_root root {root}");
        } else {
            request::scope(|scope| {
                rp.immediate_gather_varcount_into(scope, &mine[..]).wait();
            });
        }

        let mut got = [0i32; 2];
        if me == root {
            let all: Vec<i32> = (0..n).flat_map(|r| [val(r, 0), val(r, 1)]).collect();
            request::scope(|scope| {
                rp.immediate_scatter_into_root(scope, &all[..], &mut got[..]).wait();
            });
        } else {
            request::scope(|scope| {
                rp.immediate_scatter_into(scope, &mut got[..]).wait();
            });
        }
        assert_eq!(got, [val(me, 0), val(me, 1)], "immediate_scatter_into root {root}");

        let mut got = vec![0i32; me as usize + 1];
        if me == root {
            let counts: Vec<Count> = (0..n).map(|r| r + 1).collect();
            let displs: Vec<Count> = counts.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
            let all: Vec<i32> = (0..n).flat_map(|r| (0..=r as usize).map(move |i| val(r, i))).collect();
            let part = Partition::new(&all[..], &counts[..], &displs[..]);
            request::scope(|scope| {
                rp.immediate_scatter_varcount_into_root(scope, &part, &mut got[..]).wait();
            });
        } else {
            request::scope(|scope| {
                rp.immediate_scatter_varcount_into(scope, &mut got[..]).wait();
            });
        }
        assert_eq!(got, (0..=me as usize).map(|i| val(me, i)).collect::<Vec<_>>(), "immediate_scatter_varcount");

        if me == root {
            let mut out = [0i64; 2];
            request::scope(|scope| {
                rp.immediate_reduce_into_root(scope, &digit[..], &mut out[..], concat).wait();
            });
            assert_eq!(out[0], (1..=n as i64).fold(0, |a, d| a * 10 + d), "immediate_reduce_into_root {root}");
        } else {
            request::scope(|scope| {
                rp.immediate_reduce_into(scope, &digit[..], concat).wait();
            });
        }
    }
}

/// Several immediate reductions in flight at once, completed together in a request collection.
fn immediate_in_flight(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    // Several in flight at once, completed in reverse order, in a request collection.
    let a = [me; 3];
    let mut outs = [[0i32; 3]; 4];
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

/// Cartesian grids on every shape the job allows: 1-D periodic ring, 2-D (n/2 × 2 when even),
/// and a grid smaller than the job (left-out ranks get `None`).
fn cartesian(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();

    // A ring: shifts wrap.
    let ring = world.create_cartesian_communicator(&[n], &[true], true).expect("every rank is in the ring");
    assert_eq!(ring.num_dimensions(), 1);
    assert_eq!(ring.rank(), me, "ranks are kept");
    assert_eq!(ring.shift(0, 1), (Some((me - 1).rem_euclid(n)), Some((me + 1) % n)), "ring shift");
    assert_eq!(ring.coordinates_to_rank(&[me + n]), me, "periodic coordinates wrap");
    // The ring works as a communicator: a sum around it.
    let mut s = 0;
    ring.all_reduce_into(&me, &mut s, SystemOperation::sum());
    assert_eq!(s, n * (n - 1) / 2);

    // A line: no wrap.
    let line = world.create_cartesian_communicator(&[n], &[false], false).unwrap();
    let (src, dst) = line.shift(0, 1);
    assert_eq!(src, (me > 0).then(|| me - 1), "line shift source");
    assert_eq!(dst, (me + 1 < n).then_some(me + 1), "line shift destination");

    // 2-D: rows of 2 when the size is even, else a grid of n − 1 (the last rank left out).
    let rows = if n % 2 == 0 { n / 2 } else { (n - 1) / 2 };
    if rows >= 1 {
        let dims = [rows, 2];
        let grid = world.create_cartesian_communicator(&dims, &[false, true], true);
        assert_eq!(world.cartesian_map(&dims, &[false, true]), grid.as_ref().map(|g| g.rank()), "cartesian_map");
        match grid {
            None => assert!(me >= 2 * rows, "rank {me} left out of a {rows}x2 grid"),
            Some(g) => {
                let CartesianLayout { dims: d, periods, coords } = g.get_layout();
                assert_eq!(d, vec![rows, 2]);
                assert_eq!(periods, vec![false, true]);
                assert_eq!(coords, vec![me / 2, me % 2], "row-major coordinates");
                assert_eq!(g.coordinates_to_rank(&coords), me);
                for r in 0..g.size() {
                    assert_eq!(g.rank_to_coordinates(r), vec![r / 2, r % 2]);
                }
                let (mut dd, mut pp, mut cc) = ([0; 2], [false; 2], [0; 2]);
                g.get_layout_into(&mut dd, &mut pp, &mut cc);
                assert_eq!((dd, pp, cc), ([rows, 2], [false, true], [me / 2, me % 2]));
                // Along the periodic dimension of size 2, both neighbours are the other column.
                let other = me ^ 1;
                assert_eq!(g.shift(1, 1), (Some(other), Some(other)));
                assert_eq!(g.shift(1, 2), (Some(me), Some(me)));
                // Rows and columns as sub-grids, checked by a sum over each.
                let row = g.subgroup(&[false, true]);
                assert_eq!((row.size(), row.rank(), row.num_dimensions()), (2, me % 2, 1));
                let col = g.subgroup(&[true, false]);
                assert_eq!((col.size(), col.rank()), (rows, me / 2));
                let mut rs = 0;
                row.all_reduce_into(&me, &mut rs, SystemOperation::sum());
                assert_eq!(rs, (me & !1) + (me | 1), "sum over the row");
                let mut cs = 0;
                col.all_reduce_into(&me, &mut cs, SystemOperation::sum());
                assert_eq!(cs, (0..rows).map(|r| 2 * r + me % 2).sum::<i32>(), "sum over the column");
                assert_eq!(col.get_layout().periods, vec![false]);
            }
        }
    }
}

#[derive(Debug, PartialEq, Clone)]
struct Copied(i32);
impl CommAttribute for Copied {
    const CLONE_ON_DUP: bool = true;
}

#[derive(Debug, PartialEq, Clone)]
struct NotCopied(String);
impl CommAttribute for NotCopied {}

/// Two types sharing one slot through an overridden `get_key` (rsmpi's way to reach a
/// foreign keyval).
#[derive(Debug, PartialEq, Clone)]
struct SharedA(u8);
#[derive(Debug, PartialEq, Clone)]
struct SharedB(u8);
const SHARED_KEY: i32 = -7;
impl CommAttribute for SharedA {
    fn get_key() -> mpi::attribute::AttributeKey {
        // SAFETY: p2pmpi accepts any key (a negative one is never handed out by default).
        unsafe { mpi::attribute::AttributeKey::new_unchecked(SHARED_KEY) }
    }
}
impl CommAttribute for SharedB {
    fn get_key() -> mpi::attribute::AttributeKey {
        // SAFETY: as for `SharedA`.
        unsafe { mpi::attribute::AttributeKey::new_unchecked(SHARED_KEY) }
    }
}

fn set_through_dyn(comm: &mut dyn Communicator, v: i32) {
    comm.set_attr(Copied(v));
}

fn attributes(universe: &mpi::environment::Universe) {
    let mut world = universe.world();
    let n = world.size() as usize;
    let size = universe.size().expect("a universe size");
    match std::env::var("P2PMPI_UNIVERSE_SIZE").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(u) => assert_eq!(size, u.max(n), "universe size from the launcher"),
        None => assert_eq!(size, n, "universe size without more knowledge: the job's size"),
    }
    assert_eq!(world.get_attr::<Copied>(), None);
    world.set_attr(Copied(10));
    world.set_attr(NotCopied("x".into()));
    assert_eq!(world.get_attr::<Copied>(), Some(&Copied(10)));
    let r = world.get_attr::<NotCopied>().cloned();
    assert_eq!(r, Some(NotCopied("x".into())));
    let mut dup = world.duplicate();
    assert_eq!(dup.get_attr::<Copied>(), Some(&Copied(10)), "CLONE_ON_DUP attribute copied");
    assert_eq!(dup.get_attr::<NotCopied>(), None, "other attributes not copied");
    set_through_dyn(&mut dup, 20);
    assert_eq!(dup.get_attr::<Copied>(), Some(&Copied(20)));
    assert_eq!(world.get_attr::<Copied>(), Some(&Copied(10)), "the duplicate's attributes are its own");
    // Another handle of the world sees the world's attributes.
    assert_eq!(universe.world().get_attr::<Copied>(), Some(&Copied(10)));
    // Keys: one per type, stable; an overridden key is shared by the types that return it.
    assert_eq!(Copied::get_key(), Copied::get_key());
    assert_ne!(Copied::get_key(), NotCopied::get_key());
    assert_eq!(SharedA::get_key(), SharedB::get_key());
    world.set_attr(SharedA(1));
    assert_eq!(world.get_attr::<SharedA>(), Some(&SharedA(1)));
    assert_eq!(world.get_attr::<SharedB>(), None, "the slot holds a SharedA");
    world.set_attr(SharedB(2));
    assert_eq!(world.get_attr::<SharedA>(), None, "replaced by a SharedB in the shared slot");
    assert_eq!(world.get_attr::<SharedB>(), Some(&SharedB(2)));
    assert_eq!(world.get_attr::<Copied>(), Some(&Copied(10)), "other slots untouched");
}

unsafe extern "C" fn c_max_abs(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _dt: *mut MPI_Datatype) {
    // SAFETY: the library passes `*len` elements of the reduced type (i64 here) at each pointer.
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts(invec as *const i64, *len as usize),
            std::slice::from_raw_parts_mut(inoutvec as *mut i64, *len as usize),
        )
    };
    for (a, b) in x.iter().zip(y) {
        if a.abs() > b.abs() {
            *b = *a;
        }
    }
}

/// Keeps the left operand: not commutative, so the result is rank 0's value.
unsafe extern "C" fn c_first(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _dt: *mut MPI_Datatype) {
    // SAFETY: as in `c_max_abs`, the buffers do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(invec as *const i64, inoutvec as *mut i64, *len as usize) };
}

#[allow(
    clippy::needless_borrows_for_generic_args,
    reason = "rsmpi's form: an UnsafeUserOperation is passed by reference"
)]
fn unsafe_op(world: &SimpleCommunicator) {
    let n = world.size() as i64;
    let me = world.rank() as i64;
    // SAFETY: `c_max_abs` reads and writes `*len` i64 values, the type it is used with.
    let op = unsafe { UnsafeUserOperation::commutative(c_max_abs) };
    let x = [if me % 2 == 0 { me } else { -me }, 3];
    let mut r = [0i64; 2];
    world.all_reduce_into(&x[..], &mut r[..], &op);
    let want = if (n - 1) % 2 == 0 { n - 1 } else { -(n - 1) };
    assert_eq!(r, [want, 3], "UnsafeUserOperation all_reduce_into");
    // SAFETY: `c_first` copies `*len` i64 values.
    let first = unsafe { UnsafeUserOperation::associative(c_first) };
    let mut f = 0i64;
    world.all_reduce_into(&(me + 100), &mut f, &first);
    assert_eq!(f, 100, "a non-commutative UnsafeUserOperation is applied in rank order");
    let (mine, mut g) = (me + 100, 0i64);
    request::scope(|scope| world.immediate_all_reduce_into(scope, &mine, &mut g, &first).wait());
    assert_eq!(g, 100, "UnsafeUserOperation in an immediate collective");
}

fn dyn_buffer(world: &SimpleCommunicator) {
    let me = world.rank();
    let dt = i32::equivalent_datatype().dup();
    let mut ints = if me == 0 { [1i32, 2, 3, 4] } else { [0; 4] };
    {
        // SAFETY: `ints` holds 4 i32, borrowed exclusively by the buffer while it lives.
        let mut buffer = unsafe { DynBufferMut::from_raw(ints.as_mut_ptr(), ints.count(), dt.as_ref()) };
        world.process_at_rank(0).broadcast_into(&mut buffer);
    }
    assert_eq!(ints, [1, 2, 3, 4], "broadcast into a DynBufferMut");
    let mut all = vec![0i32; world.size() as usize];
    {
        let mut buffer = DynBufferMut::new(&mut all[..]);
        world.all_gather_into(&me, &mut buffer);
    }
    assert_eq!(all, (0..world.size()).collect::<Vec<_>>(), "all_gather into a DynBufferMut");
    // A DynBuffer as a send buffer; a DynBufferMut's reborrow too.
    let mine = [me, -me];
    let mut pairs = vec![0i32; 2 * world.size() as usize];
    world.all_gather_into(&DynBuffer::new(&mine[..]), &mut pairs[..]);
    assert_eq!(pairs, (0..world.size()).flat_map(|r| [r, -r]).collect::<Vec<_>>(), "all_gather from a DynBuffer");
    let mut sums = [0i32; 2];
    {
        let mut out = DynBufferMut::new(&mut sums[..]);
        let src = [1i32, me];
        let mut store = [0i32; 2];
        let mut sbuf = DynBufferMut::new(&mut store[..]);
        sbuf.reborrow_mut().downcast::<i32>().unwrap().copy_from_slice(&src);
        world.all_reduce_into(&sbuf.reborrow(), &mut out, SystemOperation::sum());
    }
    let n = world.size();
    assert_eq!(sums, [n, n * (n - 1) / 2], "all_reduce from a reborrowed DynBuffer into a DynBufferMut");
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
            "cartesian" => cartesian(&world),
            "attributes" => attributes(&universe),
            "unsafe_op" => unsafe_op(&world),
            "dyn_buffer" => dyn_buffer(&world),
            other => panic!("unknown part {other}"),
        }
    }
    world.barrier();
    if world.rank() == 0 {
        println!("OK api_checks n={} {}", world.size(), parts.join(" "));
    }
}
