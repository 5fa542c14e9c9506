//! Behaviour checks of rsmpi's raw layer on p2pmpi: `mpi::raw` (`as_raw`/`from_raw` of
//! communicators, groups, datatypes, operations, requests, statuses), the C-style functions
//! of `mpi::ffi` on those handles, attribute copy and delete callbacks, and the graph
//! topology placeholders.
//!
//! `raw_checks [PART...]` runs the named parts (`handles`, `ffi`, `callbacks`, `keyvals`,
//! `topology`, and `inter`, which spawns 2 children of this program), all but `inter` by
//! default. Every rank checks its own results and panics on the
//! first wrong one (naming the check); rank 0 prints `OK raw_checks n=<size> <parts>` at the
//! end.
use mpi::collective::{SystemOperation, UnsafeUserOperation, UserOperation};
use mpi::datatype::UserDatatype;
use mpi::datatype::{DynBuffer, DynBufferMut};
use mpi::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Group, MPI_Op, MPI_Request, MPI_Status};
use mpi::point_to_point::Status;
use mpi::request::StaticScope;
use mpi::topology::{CartesianCommunicator, IntoTopology, SimpleCommunicator, SystemGroup, Topology};
use mpi::traits::*;
use mpi::Rank;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

const OK: c_int = ffi::MPI_SUCCESS as c_int;

/// Reads a predefined name of `mpi::ffi` (an `extern` static, as in rsmpi).
macro_rules! rsmpi {
    ($name:ident) => {
        // SAFETY: the predefined names are initialized statics that nothing writes.
        unsafe { ffi::$name }
    };
}

/// Checks an ffi call's code.
fn ok(code: c_int, what: &str) {
    assert_eq!(code, OK, "{what} returned {code}");
}

/// `as_raw` / `from_raw` of communicators, groups, datatypes, operations and requests.
fn handles(world: &SimpleCommunicator) {
    handles_of_communicators(world);
    handles_of_cartesian(world);
    handles_of_groups_and_datatypes(world);
    handles_of_operations(world);
    handles_of_requests(world);
    world.barrier();
}

/// The predefined handles; the world's, self's and a duplicate's handles, and back.
fn handles_of_communicators(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    // The predefined names read as rsmpi programs read them (extern statics).
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let (world_h, self_h, int32, sum) =
        unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_COMM_SELF, ffi::RSMPI_INT32_T, ffi::RSMPI_SUM) };
    assert_eq!((world.as_raw(), SimpleCommunicator::self_comm().as_raw()), (world_h, self_h));
    assert_eq!((i32::equivalent_datatype().as_raw(), SystemOperation::sum().as_raw()), (int32, sum));

    // The world and self communicators have their predefined handles, and come back.
    assert_eq!(world.as_raw(), rsmpi!(RSMPI_COMM_WORLD), "world's handle");
    assert_eq!(SimpleCommunicator::self_comm().as_raw(), rsmpi!(RSMPI_COMM_SELF), "self's handle");
    // SAFETY: the world's handle names the live world.
    let w2 = unsafe { SimpleCommunicator::from_raw(world.as_raw()) };
    assert_eq!((w2.rank(), w2.size()), (me, n), "world from its handle");
    assert_eq!(world.compare(&w2), mpi::topology::CommunicatorRelation::Identical);
    // SAFETY: `RSMPI_COMM_SELF` names this process's own communicator.
    let s = unsafe { SimpleCommunicator::from_raw(ffi::RSMPI_COMM_SELF) };
    assert_eq!((s.rank(), s.size()), (0, 1), "self from its handle");

    // A duplicate gets a handle of its own, stable, shared by its processes' views.
    let dup = world.duplicate();
    let h = dup.as_raw();
    assert_ne!(h, rsmpi!(RSMPI_COMM_WORLD));
    assert_ne!(h, rsmpi!(RSMPI_COMM_NULL));
    assert_eq!(dup.as_raw(), h, "as_raw is stable");
    assert_eq!(dup.this_process().as_raw(), h, "a process's handle is its communicator's");
    assert_eq!(dup.any_process().as_raw(), h);
    let by_ref: &SimpleCommunicator = &dup;
    assert_eq!(AsRaw::as_raw(&by_ref), h, "a reference's handle");
    {
        // SAFETY: `h` names `dup`, alive here.
        let again = unsafe { SimpleCommunicator::from_raw(h) };
        assert_eq!(
            again.compare(&dup),
            mpi::topology::CommunicatorRelation::Identical,
            "from_raw gives the same communicator"
        );
        // Point-to-point through the copy reaches the original's traffic.
        if n > 1 {
            let next = (me + 1) % n;
            let prev = (me + n - 1) % n;
            let mut got = 0i32;
            mpi::point_to_point::send_receive_into(
                &(me * 10),
                &again.process_at_rank(next),
                &mut got,
                &dup.process_at_rank(prev),
            );
            assert_eq!(got, prev * 10, "traffic between a communicator and its from_raw copy");
        }
    }
    // The dup is still alive (the copy did not own it).
    let mut size = 0;
    // SAFETY: `size` is a live local.
    ok(unsafe { ffi::MPI_Comm_size(h, &mut size) }, "MPI_Comm_size(dup)");
    assert_eq!(size, n);
    drop(dup);
    // Its handle is dead now.
    // SAFETY: as above.
    let code = unsafe { ffi::MPI_Comm_size(h, &mut size) };
    assert_eq!(code, ffi::MPI_ERR_COMM as c_int, "a dropped communicator's handle is dead");
    // SAFETY: as above.
    let code = unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_NULL, &mut size) };
    assert_eq!(code, ffi::MPI_ERR_COMM as c_int, "the null communicator");
}

/// A Cartesian communicator keeps its layout through its handle.
fn handles_of_cartesian(world: &SimpleCommunicator) {
    let n = world.size();
    // A Cartesian communicator keeps its layout through its handle.
    let cart = world.create_cartesian_communicator(&[n], &[true], false).expect("every rank in a ring");
    let ch = cart.as_raw();
    // SAFETY: `ch` names `cart`, alive here.
    let cart2 = unsafe { CartesianCommunicator::from_raw(ch) };
    assert_eq!(cart2.get_layout(), cart.get_layout(), "Cartesian layout through the handle");
    assert_eq!(cart2.shift(0, 1), cart.shift(0, 1));
    // SAFETY: as above.
    let as_simple = unsafe { SimpleCommunicator::from_raw(ch) };
    assert_eq!(as_simple.topology(), Topology::Cartesian, "a Cartesian handle made simple still says Cartesian");
    match as_simple.into_topology() {
        IntoTopology::Cartesian(c) => assert_eq!(c.get_layout(), cart.get_layout()),
        _ => panic!("into_topology of a Cartesian handle"),
    }
    // SAFETY: the world's handle names a communicator without a layout.
    assert!(unsafe { CartesianCommunicator::try_from_raw(ffi::RSMPI_COMM_WORLD) }.is_none());
    // SAFETY: the world is no intercommunicator.
    assert!(unsafe { mpi::topology::InterCommunicator::try_from_raw(ffi::RSMPI_COMM_WORLD) }.is_none());
    let mut topo = 0;
    // SAFETY: `topo` is a live local.
    ok(unsafe { ffi::MPI_Topo_test(ch, &mut topo) }, "MPI_Topo_test");
    assert_eq!(topo, rsmpi!(RSMPI_CART));
    // SAFETY: as above.
    ok(unsafe { ffi::MPI_Topo_test(ffi::RSMPI_COMM_WORLD, &mut topo) }, "MPI_Topo_test");
    assert_eq!(topo, rsmpi!(RSMPI_UNDEFINED));
}

/// Groups' and datatypes' handles, and a datatype made from a raw handle used in a reduction.
fn handles_of_groups_and_datatypes(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    // Groups.
    assert_eq!(SystemGroup::empty().as_raw(), rsmpi!(RSMPI_GROUP_EMPTY));
    let g = world.group();
    let gh = g.as_raw();
    assert_eq!(g.as_raw(), gh);
    let (mut gs, mut gr) = (0, 0);
    // SAFETY: live locals.
    ok(unsafe { ffi::MPI_Group_size(gh, &mut gs) }, "MPI_Group_size");
    // SAFETY: live locals.
    ok(unsafe { ffi::MPI_Group_rank(gh, &mut gr) }, "MPI_Group_rank");
    assert_eq!((gs, gr), (n, me));
    // SAFETY: live locals.
    ok(unsafe { ffi::MPI_Group_size(ffi::RSMPI_GROUP_EMPTY, &mut gs) }, "MPI_Group_size(empty)");
    assert_eq!(gs, 0);

    // Datatypes: the primitive types' handles are the predefined names; a user datatype's
    // handle names its layout.
    assert_eq!(i32::equivalent_datatype().as_raw(), rsmpi!(RSMPI_INT32_T));
    assert_eq!(f64::equivalent_datatype().as_raw(), rsmpi!(RSMPI_DOUBLE));
    assert_eq!(u8::equivalent_datatype().as_raw(), rsmpi!(RSMPI_UINT8_T));
    assert_eq!(bool::equivalent_datatype().as_raw(), rsmpi!(RSMPI_C_BOOL));
    let vec3 = UserDatatype::contiguous(3, &i64::equivalent_datatype());
    let mut tsize = 0;
    // SAFETY: `vec3` lives; `tsize` is a live local.
    ok(unsafe { ffi::MPI_Type_size(vec3.as_raw(), &mut tsize) }, "MPI_Type_size");
    assert_eq!(tsize, 24);
    // SAFETY: `vec3` outlives the reference.
    let r: mpi::datatype::DatatypeRef<'_> = unsafe { FromRaw::from_raw(vec3.as_raw()) };
    assert_eq!(r.as_raw(), vec3.as_raw());
    // SAFETY: the predefined handle names `i32`'s layout.
    let copy = unsafe { UserDatatype::from_raw(ffi::RSMPI_INT32_T) };
    let mut sum = [0i32; 2];
    let mine = [me, 1];
    // Used in a reduction: the copy describes i32s.
    // SAFETY: two i32s each, which `copy` describes.
    let (sv, mut rv) = unsafe {
        (
            mpi::datatype::View::with_count_and_datatype(&mine[..], 2, &copy),
            mpi::datatype::MutView::with_count_and_datatype(&mut sum[..], 2, &copy),
        )
    };
    world.all_reduce_into(&sv, &mut rv, SystemOperation::sum());
    assert_eq!(sum, [n * (n - 1) / 2, n], "a datatype made from a raw handle");
}

/// Operations' handles: system, unsafe user and closure operations, and ones made from handles.
fn handles_of_operations(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    // Operations.
    assert_eq!(SystemOperation::sum().as_raw(), rsmpi!(RSMPI_SUM));
    assert_eq!(SystemOperation::max().as_raw(), rsmpi!(RSMPI_MAX));
    assert_eq!(SystemOperation::bitwise_xor().as_raw(), rsmpi!(RSMPI_BXOR));
    // SAFETY: `c_max_i32` works on i32 buffers, its only use here.
    let uop = unsafe { UnsafeUserOperation::commutative(c_max_i32) };
    let oh = uop.as_raw();
    assert_eq!(uop.as_raw(), oh, "a user operation's handle is stable");
    let (x, mut y) = ([me * 3 - n], [0i32]);
    // SAFETY: one i32 each, the type `c_max_i32` handles.
    ok(
        unsafe {
            ffi::MPI_Allreduce(
                x.as_ptr() as *const c_void,
                y.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                oh,
                world.as_raw(),
            )
        },
        "MPI_Allreduce(user op)",
    );
    assert_eq!(y[0], (n - 1) * 3 - n, "MPI_Allreduce with a Rust user operation's handle");

    // A closure operation's handle, and an operation made from a handle.
    let closure_op = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
        let x = x.downcast::<i32>().expect("i32 elements");
        for (a, b) in x.iter().zip(y.downcast::<i32>().expect("i32 elements")) {
            *b = (*a).min(*b);
        }
    });
    let coh = closure_op.as_raw();
    assert_eq!(closure_op.as_raw(), coh, "a closure operation's handle is stable");
    assert_ne!(coh, oh);
    let (x, mut y) = ([me + 5], [0i32]);
    // SAFETY: one i32 each, the type the closure handles; `closure_op` lives.
    ok(
        unsafe {
            ffi::MPI_Allreduce(
                x.as_ptr() as *const c_void,
                y.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                coh,
                world.as_raw(),
            )
        },
        "MPI_Allreduce(closure op)",
    );
    assert_eq!(y[0], 5, "MPI_Allreduce with a closure operation's handle");
    drop(closure_op);
    // SAFETY: as above; the handle is dead and refused.
    let code = unsafe {
        ffi::MPI_Allreduce(
            x.as_ptr() as *const c_void,
            y.as_mut_ptr() as *mut c_void,
            1,
            ffi::RSMPI_INT32_T,
            coh,
            world.as_raw(),
        )
    };
    assert_eq!(code, ffi::MPI_ERR_OP as c_int, "a dropped closure operation's handle is dead");
    // SAFETY: `RSMPI_PROD` is predefined; the anchor is kept with the operation.
    let prod = unsafe { UserOperation::from_raw(ffi::RSMPI_PROD, Box::new(String::from("anchor"))) };
    assert_eq!(prod.as_raw(), rsmpi!(RSMPI_PROD));
    let mut p = 0i64;
    world.all_reduce_into(&(me as i64 + 1), &mut p, &prod);
    assert_eq!(p, (1..=n as i64).product::<i64>(), "UserOperation::from_raw(RSMPI_PROD)");
    // SAFETY: `oh` names `uop`'s function, alive for the run.
    let maxed = unsafe { UserOperation::from_raw(oh, Box::new(())) };
    let mut m = 0i32;
    world.all_reduce_into(&(me * 7), &mut m, &maxed);
    assert_eq!(m, (n - 1) * 7, "UserOperation::from_raw of an UnsafeUserOperation's handle");
}

/// Requests handed over to raw handles, completed by MPI_Wait / MPI_Test or taken back.
fn handles_of_requests(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    // Requests: handed over to a raw handle, completed by MPI_Wait / MPI_Test or taken back.
    if n > 1 {
        let next = (me + 1) % n;
        let prev = (me + n - 1) % n;
        static SEND: [i32; 4] = [1, 2, 3, 4];
        let recv: &'static mut [i32; 4] = Box::leak(Box::new([0; 4]));
        let sreq = world.process_at_rank(next).immediate_send_with_tag(StaticScope, &SEND[..], 7);
        let rreq = world.process_at_rank(prev).immediate_receive_into_with_tag(StaticScope, &mut recv[..], 7);
        let as_raw = sreq.as_raw();
        // SAFETY: `SEND` is static; the request completes below.
        let (sh, data, _scope) = unsafe { sreq.into_raw() };
        assert_eq!(sh, as_raw, "as_raw and into_raw give the same handle");
        assert_eq!(data, &SEND[..]);
        // SAFETY: the receive buffer is leaked (static) and read only once completed.
        let (rh, rdata, scope) = unsafe { rreq.into_raw() };
        // Taken back as a Rust request and waited for there.
        // SAFETY: `rh` came from `into_raw` with this buffer and scope.
        let rreq = unsafe { mpi::request::Request::from_raw(rh, rdata, scope) };
        let st = rreq.wait();
        assert_eq!((st.source_rank(), st.tag()), (prev, 7));
        let mut sh = sh;
        let mut st = MPI_Status::default();
        let mut flag = 0;
        // SAFETY: `sh` is a handle from `into_raw`, `flag` and `st` live locals.
        ok(unsafe { ffi::MPI_Test(&mut sh, &mut flag, &mut st) }, "MPI_Test");
        if flag == 0 {
            assert_ne!(sh, rsmpi!(RSMPI_REQUEST_NULL), "a request not completed keeps its handle");
            // SAFETY: as above.
            ok(unsafe { ffi::MPI_Wait(&mut sh, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Wait");
        }
        assert_eq!(sh, rsmpi!(RSMPI_REQUEST_NULL), "a completed request's handle is null");
        // SAFETY: the handle is null now: MPI_Wait returns at once.
        ok(unsafe { ffi::MPI_Wait(&mut sh, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Wait(null)");
        assert_eq!(rdata, &[1, 2, 3, 4][..], "received through a request taken back from its handle");
        // A request still held by a Rust `Request` cannot be completed through its handle.
        let sreq = world.process_at_rank(next).immediate_send_with_tag(StaticScope, &SEND[..], 8);
        let mut held: MPI_Request = sreq.as_raw();
        // SAFETY: `held` is a live local.
        assert_eq!(unsafe { ffi::MPI_Wait(&mut held, ffi::RSMPI_STATUS_IGNORE) }, ffi::MPI_ERR_REQUEST as c_int);
        sreq.wait();
        let mut again = [0i32; 4];
        world.process_at_rank(prev).receive_into_with_tag(&mut again[..], 8);
        assert_eq!(again, SEND);
    }
}

unsafe extern "C" fn c_max_i32(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _dt: *mut MPI_Datatype) {
    // SAFETY: the library passes `*len` i32 values at each pointer (the only type used).
    let (x, y) = unsafe {
        (
            std::slice::from_raw_parts(invec as *const i32, *len as usize),
            std::slice::from_raw_parts_mut(inoutvec as *mut i32, *len as usize),
        )
    };
    for (a, b) in x.iter().zip(y) {
        *b = (*a).max(*b);
    }
}

/// Keeps the left operand (not commutative): the result of a reduction is rank 0's value.
unsafe extern "C" fn c_first(invec: *mut c_void, inoutvec: *mut c_void, len: *mut c_int, _dt: *mut MPI_Datatype) {
    // SAFETY: as in `c_max_i32`; the buffers do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(invec as *const i32, inoutvec as *mut i32, *len as usize) };
}

/// The C functions, on a communicator taken through `as_raw`.
fn ffi_calls(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w: MPI_Comm = world.as_raw();
    let (mut r, mut s) = (-1, -1);
    // SAFETY: (so for every ffi call of this function) every pointer is to a live local or
    // buffer of the stated count and datatype; every handle is live.
    unsafe {
        ok(ffi::MPI_Comm_rank(w, &mut r), "MPI_Comm_rank");
        ok(ffi::MPI_Comm_size(w, &mut s), "MPI_Comm_size");
    }
    assert_eq!((r, s), (me, n));
    let mut flag = 0;
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Initialized(&mut flag), "MPI_Initialized") };
    assert_eq!(flag, 1);

    // Dup, compare, and the Rust object of the dup (which then owns it).
    let mut d: MPI_Comm = rsmpi!(RSMPI_COMM_NULL);
    let mut rel = -1;
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_dup(w, &mut d), "MPI_Comm_dup");
        ok(ffi::MPI_Comm_compare(w, d, &mut rel), "MPI_Comm_compare");
    }
    assert_eq!(rel, rsmpi!(RSMPI_CONGRUENT), "a duplicate is congruent");
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Comm_compare(w, w, &mut rel), "MPI_Comm_compare") };
    assert_eq!(rel, rsmpi!(RSMPI_IDENT));
    let mut split = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above. Even ranks in one communicator, odd ranks in another, reversed.
    unsafe { ok(ffi::MPI_Comm_split(w, me % 2, -me, &mut split), "MPI_Comm_split") };
    let half = (n + 1 - me % 2) / 2;
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_size(split, &mut s), "MPI_Comm_size(split)");
        ok(ffi::MPI_Comm_rank(split, &mut r), "MPI_Comm_rank(split)");
    }
    assert_eq!((s, r), (half, half - 1 - me / 2), "MPI_Comm_split by parity, reversed by key");
    if n > 2 {
        // SAFETY: as above.
        unsafe { ok(ffi::MPI_Comm_compare(w, split, &mut rel), "MPI_Comm_compare") };
        assert_eq!(rel, rsmpi!(RSMPI_UNEQUAL));
    }
    let mut none = w;
    let color = if me == 0 { rsmpi!(RSMPI_UNDEFINED) } else { 1 };
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Comm_split(w, color, 0, &mut none), "MPI_Comm_split(undefined)") };
    assert_eq!(none == rsmpi!(RSMPI_COMM_NULL), me == 0, "RSMPI_UNDEFINED gives no communicator");
    if none != rsmpi!(RSMPI_COMM_NULL) {
        // SAFETY: as above.
        unsafe { ok(ffi::MPI_Comm_free(&mut none), "MPI_Comm_free") };
    }

    ffi_groups_of_handles(world, d, split);
    ffi_ring_on_dup(world, d);
    ffi_collectives(world, d);
    ffi_op_create(world, d);

    // Time.
    // SAFETY: no arguments.
    let (t0, t1, tick, rtick) = unsafe { (ffi::MPI_Wtime(), ffi::RSMPI_Wtime(), ffi::MPI_Wtick(), ffi::RSMPI_Wtick()) };
    assert!(t1 >= t0 && tick > 0.0 && rtick == tick, "MPI_Wtime, MPI_Wtick");

    // The dup, taken over by a Rust object, works as one; its handle stays valid while it
    // lives, and dies with it.
    {
        // SAFETY: `d` names the live dup.
        let dc = unsafe { SimpleCommunicator::from_raw(d) };
        assert_eq!(dc.as_raw(), d, "the Rust object of a handle has that handle");
        let mut v = 0;
        dc.all_reduce_into(&1, &mut v, SystemOperation::sum());
        assert_eq!(v, n);
    }
    // SAFETY: as above.
    unsafe {
        assert_eq!(ffi::MPI_Comm_size(d, &mut s), ffi::MPI_ERR_COMM as c_int, "the dup died with its Rust object");
        // The split, freed through its handle.
        ok(ffi::MPI_Comm_free(&mut split), "MPI_Comm_free");
        assert_eq!(split, ffi::RSMPI_COMM_NULL);
        let mut w2 = w;
        assert_eq!(ffi::MPI_Comm_free(&mut w2), ffi::MPI_ERR_COMM as c_int, "the world cannot be freed");
    }
    world.barrier();
}

/// MPI_Comm_group of the dup and the split; ranks translated between them; MPI_Group_free.
fn ffi_groups_of_handles(world: &SimpleCommunicator, d: MPI_Comm, split: MPI_Comm) {
    let n = world.size();
    let me = world.rank();
    let half = (n + 1 - me % 2) / 2;
    let mut rel = -1;
    // Groups of a handle.
    let mut g: MPI_Group = rsmpi!(RSMPI_GROUP_NULL);
    let mut sg: MPI_Group = rsmpi!(RSMPI_GROUP_NULL);
    let (mut gs, mut gr) = (0, 0);
    // SAFETY: (so for every ffi call of this function) every pointer is to a live local or buffer
    // of the stated count and datatype; every handle is live.
    unsafe {
        ok(ffi::MPI_Comm_group(d, &mut g), "MPI_Comm_group");
        ok(ffi::MPI_Comm_group(split, &mut sg), "MPI_Comm_group(split)");
        ok(ffi::MPI_Group_size(g, &mut gs), "MPI_Group_size");
        ok(ffi::MPI_Group_rank(g, &mut gr), "MPI_Group_rank");
    }
    assert_eq!((gs, gr), (n, me));
    let world_ranks: Vec<c_int> = (0..n).collect();
    let mut in_split = vec![0; n as usize];
    // SAFETY: as above: `n` ranks each way.
    unsafe {
        ok(
            ffi::MPI_Group_translate_ranks(g, n, world_ranks.as_ptr(), sg, in_split.as_mut_ptr()),
            "MPI_Group_translate_ranks",
        )
    };
    for (w, t) in in_split.iter().enumerate() {
        let want = if w as Rank % 2 == me % 2 { half - 1 - w as Rank / 2 } else { rsmpi!(RSMPI_UNDEFINED) };
        assert_eq!(*t, want, "world rank {w} in the split");
    }
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Group_compare(g, g, &mut rel), "MPI_Group_compare");
        assert_eq!(rel, ffi::RSMPI_IDENT);
        ok(ffi::MPI_Group_free(&mut g), "MPI_Group_free");
        ok(ffi::MPI_Group_free(&mut sg), "MPI_Group_free");
        assert_eq!(g, ffi::RSMPI_GROUP_NULL);
        assert_eq!(ffi::MPI_Group_size(sg, &mut gs), ffi::MPI_ERR_GROUP as c_int, "a freed group");
    }
}

/// Point-to-point on the dup: a ring with statuses and counts, argument errors, the null process.
fn ffi_ring_on_dup(world: &SimpleCommunicator, d: MPI_Comm) {
    let n = world.size();
    let me = world.rank();
    // Point-to-point on the dup: a ring, with statuses and counts.
    if n > 1 {
        let next = (me + 1) % n;
        let prev = (me + n - 1) % n;
        let out: Vec<f64> = (0..=me).map(|i| i as f64 + 0.5).collect();
        let mut inb = vec![0f64; n as usize];
        let mut st = MPI_Status::default();
        let mut count = -1;
        // SAFETY: (so for every ffi call of this function) every pointer is to a live local or
        // buffer of the stated count and datatype; every handle is live. Even ranks send first so
        // that the ring cannot block.
        unsafe {
            let send = || {
                ok(
                    ffi::MPI_Send(out.as_ptr() as *const c_void, me + 1, ffi::RSMPI_DOUBLE, next, 40 + me, d),
                    "MPI_Send",
                )
            };
            if me % 2 == 0 {
                send();
            }
            ok(
                ffi::MPI_Recv(
                    inb.as_mut_ptr() as *mut c_void,
                    n,
                    ffi::RSMPI_DOUBLE,
                    ffi::RSMPI_ANY_SOURCE,
                    ffi::RSMPI_ANY_TAG,
                    d,
                    &mut st,
                ),
                "MPI_Recv",
            );
            if me % 2 == 1 {
                send();
            }
            ok(ffi::MPI_Get_count(&st, ffi::RSMPI_DOUBLE, &mut count), "MPI_Get_count");
        }
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG, st.MPI_ERROR), (prev, 40 + prev, OK), "status of MPI_Recv");
        assert_eq!(count, prev + 1, "MPI_Get_count");
        let want: Vec<f64> = (0..=prev).map(|i| i as f64 + 0.5).collect();
        assert_eq!(&inb[..=prev as usize], &want[..]);
        let rs = Status::from_raw(st);
        assert_eq!(
            (rs.source_rank(), rs.tag(), rs.count(f64::equivalent_datatype())),
            (prev, 40 + prev, prev + 1),
            "Status::from_raw"
        );
        // SAFETY: as above: 16 bytes are not a whole number of 3 × i64 = 24 bytes.
        unsafe {
            let vec3 = UserDatatype::contiguous(3, &i64::equivalent_datatype());
            ok(ffi::MPI_Get_count(&st, vec3.as_raw(), &mut count), "MPI_Get_count");
        }
        if (prev + 1) * 8 % 24 != 0 {
            assert_eq!(count, rsmpi!(RSMPI_UNDEFINED), "a count that is not whole");
        }
        // Errors: a rank out of range, a negative count, a null datatype.
        // SAFETY: as above; nothing is sent.
        unsafe {
            assert_eq!(
                ffi::MPI_Send(out.as_ptr() as *const c_void, 1, ffi::RSMPI_DOUBLE, n, 0, d),
                ffi::MPI_ERR_RANK as c_int
            );
            assert_eq!(
                ffi::MPI_Send(out.as_ptr() as *const c_void, -1, ffi::RSMPI_DOUBLE, next, 0, d),
                ffi::MPI_ERR_COUNT as c_int
            );
            assert_eq!(
                ffi::MPI_Send(out.as_ptr() as *const c_void, 1, ffi::RSMPI_DATATYPE_NULL, next, 0, d),
                ffi::MPI_ERR_TYPE as c_int
            );
        }
    }
    // The null process: nothing happens.
    let mut st = MPI_Status::default();
    let mut nothing = [7i32];
    // SAFETY: as above.
    unsafe {
        ok(
            ffi::MPI_Send(nothing.as_ptr() as *const c_void, 1, ffi::RSMPI_INT32_T, ffi::RSMPI_PROC_NULL, 0, d),
            "MPI_Send(PROC_NULL)",
        );
        ok(
            ffi::MPI_Recv(
                nothing.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                ffi::RSMPI_PROC_NULL,
                0,
                d,
                &mut st,
            ),
            "MPI_Recv(PROC_NULL)",
        );
    }
    assert_eq!((st.MPI_SOURCE, st.MPI_TAG, nothing[0]), (rsmpi!(RSMPI_PROC_NULL), rsmpi!(RSMPI_ANY_TAG), 7));
}

/// MPI_Barrier, MPI_Bcast and MPI_Reduce from every root, MPI_Allreduce (SUM, BOR) on the dup.
fn ffi_collectives(world: &SimpleCommunicator, d: MPI_Comm) {
    let n = world.size();
    let me = world.rank();
    // Collectives.
    // SAFETY: (so for every ffi call of this function) every pointer is to a live local or buffer
    // of the stated count and datatype; every handle is live.
    unsafe { ok(ffi::MPI_Barrier(d), "MPI_Barrier") };
    for root in 0..n {
        let mut b = if me == root { [root * 11, -root, 5] } else { [0; 3] };
        // SAFETY: as above.
        unsafe { ok(ffi::MPI_Bcast(b.as_mut_ptr() as *mut c_void, 3, ffi::RSMPI_INT32_T, root, d), "MPI_Bcast") };
        assert_eq!(b, [root * 11, -root, 5], "MPI_Bcast from {root}");
        let x = [me as i64 + 1, 2];
        let mut y = [0i64; 2];
        // SAFETY: as above.
        unsafe {
            ok(
                ffi::MPI_Reduce(
                    x.as_ptr() as *const c_void,
                    y.as_mut_ptr() as *mut c_void,
                    2,
                    ffi::RSMPI_INT64_T,
                    ffi::RSMPI_PROD,
                    root,
                    d,
                ),
                "MPI_Reduce",
            )
        };
        if me == root {
            let fact: i64 = (1..=n as i64).product();
            assert_eq!(y, [fact, 1 << n], "MPI_Reduce(PROD) at {root}");
        } else {
            assert_eq!(y, [0, 0], "MPI_Reduce leaves non-roots' buffers alone");
        }
    }
    let x = [me as f64, 1.0];
    let mut y = [0f64; 2];
    // SAFETY: as above.
    unsafe {
        ok(
            ffi::MPI_Allreduce(
                x.as_ptr() as *const c_void,
                y.as_mut_ptr() as *mut c_void,
                2,
                ffi::RSMPI_DOUBLE,
                ffi::RSMPI_SUM,
                d,
            ),
            "MPI_Allreduce",
        )
    };
    assert_eq!(y, [(n * (n - 1) / 2) as f64, n as f64], "MPI_Allreduce(SUM)");
    let bits = [1u32 << me];
    let mut all = [0u32];
    // SAFETY: as above.
    unsafe {
        ok(
            ffi::MPI_Allreduce(
                bits.as_ptr() as *const c_void,
                all.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_UINT32_T,
                ffi::RSMPI_BOR,
                d,
            ),
            "MPI_Allreduce(BOR)",
        )
    };
    assert_eq!(all[0], (1u32 << n) - 1);
}

/// A user operation made by MPI_Op_create, used on the dup and freed.
fn ffi_op_create(world: &SimpleCommunicator, d: MPI_Comm) {
    let me = world.rank();
    // A user operation made by MPI_Op_create (not commutative: rank 0's value wins).
    let mut op: MPI_Op = rsmpi!(RSMPI_OP_NULL);
    let mine = [me + 100];
    let mut first = [0i32];
    // SAFETY: (so for every ffi call of this function) every pointer is to a live local or buffer
    // of the stated count and datatype; every handle is live; `c_first` handles i32 buffers.
    unsafe {
        ok(ffi::MPI_Op_create(Some(c_first), 0, &mut op), "MPI_Op_create");
        ok(
            ffi::MPI_Allreduce(
                mine.as_ptr() as *const c_void,
                first.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                op,
                d,
            ),
            "MPI_Allreduce(user op)",
        );
        ok(ffi::MPI_Op_free(&mut op), "MPI_Op_free");
        assert_eq!(op, ffi::RSMPI_OP_NULL);
        assert_eq!(
            ffi::MPI_Allreduce(
                mine.as_ptr() as *const c_void,
                first.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                op,
                d
            ),
            ffi::MPI_ERR_OP as c_int
        );
    }
    assert_eq!(first[0], 100, "a non-commutative user operation in rank order");
}

// ------------------------------------------------------------------ attribute callbacks

/// Copy and delete calls seen by `Counted`'s callbacks, as (what, value).
static CALLS: Mutex<Vec<(&str, i32)>> = Mutex::new(Vec::new());

fn calls() -> Vec<(&'static str, i32)> {
    std::mem::take(&mut *CALLS.lock().unwrap())
}

/// An attribute with callbacks of its own: a duplicate gets the value + 100 if it is even,
/// nothing if it is odd; deletions are recorded.
#[derive(Clone, Debug, PartialEq)]
struct Counted(i32);

impl CommAttribute for Counted {
    unsafe extern "C" fn comm_copy_attr_fn(
        _old: MPI_Comm,
        key: c_int,
        _extra: *mut c_void,
        val_in: *mut c_void,
        val_out: *mut c_void,
        flag: *mut c_int,
    ) -> c_int {
        assert_eq!(key, Self::get_key().as_raw(), "the copy callback gets its key");
        // SAFETY: the library passes a value set by `set_attr::<Counted>` (a `Box<Counted>`),
        // a writable out pointer and flag.
        unsafe {
            let v = (*(val_in as *const Counted)).0;
            CALLS.lock().unwrap().push(("copy", v));
            if v % 2 == 0 {
                *(val_out as *mut *mut c_void) = Box::into_raw(Box::new(Counted(v + 100))) as *mut c_void;
                *flag = 1;
            } else {
                *flag = 0;
            }
        }
        OK
    }

    unsafe extern "C" fn comm_delete_attr_fn(
        _comm: MPI_Comm,
        key: c_int,
        val: *mut c_void,
        _extra: *mut c_void,
    ) -> c_int {
        assert_eq!(key, Self::get_key().as_raw(), "the delete callback gets its key");
        // SAFETY: the library passes a value set by `set_attr::<Counted>` or made by the copy
        // callback, a `Box<Counted>` given up; no reference to it is left in this program.
        let b = unsafe { Box::from_raw(val as *mut Counted) };
        CALLS.lock().unwrap().push(("delete", b.0));
        OK
    }
}

/// An attribute with the default callbacks.
#[derive(Clone, Debug, PartialEq)]
struct Plain(String);
impl CommAttribute for Plain {
    const CLONE_ON_DUP: bool = true;
}

fn callbacks(world: &SimpleCommunicator) {
    calls();
    let mut d = world.duplicate();
    d.set_attr(Counted(2));
    assert_eq!(calls(), vec![], "setting a new attribute calls nothing");
    d.set_attr(Counted(4));
    assert_eq!(calls(), vec![("delete", 2)], "replacing calls the delete callback on the old value");
    let d2 = d.duplicate();
    assert_eq!(calls(), vec![("copy", 4)], "duplicating calls the copy callback");
    assert_eq!(d2.get_attr::<Counted>(), Some(&Counted(104)), "the duplicate has what the copy callback gave");
    d.set_attr(Counted(5));
    assert_eq!(calls(), vec![("delete", 4)]);
    let d3 = d.duplicate();
    assert_eq!(calls(), vec![("copy", 5)]);
    assert_eq!(d3.get_attr::<Counted>(), None, "flag 0: the duplicate has none");
    drop(d3);
    assert_eq!(calls(), vec![], "freeing a communicator without the attribute calls nothing");
    drop(d2);
    assert_eq!(calls(), vec![("delete", 104)], "freeing a communicator deletes its attribute");
    // A second Rust object of the same communicator keeps it alive.
    // SAFETY: `d` is alive; the copy is dropped first.
    let again = unsafe { SimpleCommunicator::from_raw(d.as_raw()) };
    assert_eq!(again.get_attr::<Counted>(), Some(&Counted(5)));
    drop(d);
    assert_eq!(calls(), vec![], "not freed while another object holds it");
    drop(again);
    assert_eq!(calls(), vec![("delete", 5)], "freed with its last object");

    // MPI_Comm_dup and MPI_Comm_free through the handles run the same callbacks.
    let mut e = world.duplicate();
    e.set_attr(Counted(6));
    let mut h = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: `e` is alive; `h` a live local.
    unsafe { ok(ffi::MPI_Comm_dup(e.as_raw(), &mut h), "MPI_Comm_dup") };
    assert_eq!(calls(), vec![("copy", 6)]);
    // SAFETY: `h` is a handle from MPI_Comm_dup, freed once.
    unsafe { ok(ffi::MPI_Comm_free(&mut h), "MPI_Comm_free") };
    assert_eq!(calls(), vec![("delete", 106)], "MPI_Comm_free deletes the attributes");
    // MPI_Comm_delete_attr of a Rust attribute.
    // SAFETY: the key is `Counted`'s; `e` is alive.
    unsafe { ok(ffi::MPI_Comm_delete_attr(e.as_raw(), Counted::get_key().as_raw()), "MPI_Comm_delete_attr") };
    assert_eq!(calls(), vec![("delete", 6)]);
    assert_eq!(e.get_attr::<Counted>(), None);
    drop(e);
    assert_eq!(calls(), vec![]);

    // Default callbacks: a replaced value stays readable through another object of the
    // communicator until the communicator is freed.
    let mut w1 = world.duplicate();
    // SAFETY: `w1` is alive and outlives `w2`.
    let mut w2 = unsafe { SimpleCommunicator::from_raw(w1.as_raw()) };
    w1.set_attr(Plain("first".into()));
    let first: &Plain = w2.get_attr::<Plain>().expect("set through the other object");
    let first_ptr = first as *const Plain;
    w1.set_attr(Plain("second".into()));
    // SAFETY: the replaced value is kept until the communicator is freed (the default
    // delete callback), and `w2` keeps it alive.
    assert_eq!(unsafe { &*first_ptr }, &Plain("first".into()));
    assert_eq!(w2.get_attr::<Plain>(), Some(&Plain("second".into())));
    let w3 = w2.duplicate();
    assert_eq!(w3.get_attr::<Plain>(), Some(&Plain("second".into())), "CLONE_ON_DUP with the default copy callback");
    w2.set_attr(Plain("third".into()));
    assert_eq!(w1.get_attr::<Plain>(), Some(&Plain("third".into())));
    drop((w1, w2, w3));
    world.barrier();
}

/// The pointer of a slice as a C buffer.
fn cp<T>(x: &[T]) -> *const c_void {
    x.as_ptr() as *const c_void
}

/// The pointer of a mutable slice as a C buffer.
fn mp<T>(x: &mut [T]) -> *mut c_void {
    x.as_mut_ptr() as *mut c_void
}

/// The handles of a slice of datatypes whose representation is their handle (rsmpi's
/// `MatchesRaw`: what its `structured` passes to C).
fn raw_handles<D: MatchesRaw<Raw = MPI_Datatype>>(ds: &[D]) -> &[MPI_Datatype] {
    // SAFETY: `MatchesRaw` says a `D` is laid out as its handle.
    unsafe { std::slice::from_raw_parts(ds.as_ptr() as *const MPI_Datatype, ds.len()) }
}

/// The rest of `mpi::ffi` (non-blocking point-to-point, probes, `MPI_Sendrecv`, `MPI_Ssend`,
/// gathering collectives and `MPI_Scan`, `RSMPI_IN_PLACE`, `MPI_Comm_create`, group and
/// datatype constructors, Cartesian topologies), each against the Rust API's answers.
fn ffi_more(world: &SimpleCommunicator) {
    ffi_datatype_slices();
    ffi_wait_and_test(world);
    ffi_waitany_testany(world);
    ffi_probes_and_sendrecv(world);
    ffi_rooted_collectives(world);
    ffi_collectives_in_place(world);
    ffi_group_constructors(world);
    ffi_datatype_constructors(world);
    ffi_cartesian(world);
    world.barrier();
}

/// Owned datatypes passed to C as slices of handles (rsmpi's `MatchesRaw`).
fn ffi_datatype_slices() {
    // Owned datatypes are laid out as their handles.
    let types = [
        UserDatatype::contiguous(2, &i32::equivalent_datatype()),
        UserDatatype::vector(2, 1, 3, &i64::equivalent_datatype()),
    ];
    let hs = raw_handles(&types);
    assert_eq!(hs, &[types[0].as_raw(), types[1].as_raw()][..], "a slice of UserDatatype is a slice of handles");
    let unc = [mpi::datatype::UncommittedUserDatatype::contiguous(3, &u8::equivalent_datatype())];
    assert_eq!(raw_handles(&unc)[0], unc[0].as_raw(), "UncommittedUserDatatype too");
    let moved = types.clone();
    assert_eq!(raw_handles(&moved)[1], moved[1].as_raw(), "a clone has its own valid handle");
    let pair = UserDatatype::structured(&[1, 1], &[0, 8], &types);
    let mut tsize = 0;
    // SAFETY: `pair` lives; `tsize` is a live local.
    ok(unsafe { ffi::MPI_Type_size(pair.as_raw(), &mut tsize) }, "MPI_Type_size(structured)");
    assert_eq!(tsize, 8 + 16, "structured of UserDatatypes (rsmpi's MatchesRaw bound)");
}

/// MPI_Waitall on a non-blocking ring with a null request in the set; MPI_Testall.
fn ffi_wait_and_test(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let int32 = rsmpi!(RSMPI_INT32_T);
    let int64 = rsmpi!(RSMPI_INT64_T);
    let null_req = rsmpi!(RSMPI_REQUEST_NULL);
    // Non-blocking ring, a null request in the set: MPI_Waitall.
    let out = [me * 10, me * 10 + 1];
    let mut inb = [0i32; 2];
    let mut reqs = [null_req; 3];
    let mut sts = [MPI_Status::default(); 3];
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe {
        ok(ffi::MPI_Irecv(mp(&mut inb), 2, int32, prev, 3, w, &mut reqs[0]), "MPI_Irecv");
        ok(ffi::MPI_Isend(cp(&out), 2, int32, next, 3, w, &mut reqs[1]), "MPI_Isend");
        assert_ne!(reqs[0], reqs[1]);
        ok(ffi::MPI_Waitall(3, reqs.as_mut_ptr(), sts.as_mut_ptr()), "MPI_Waitall");
    }
    assert_eq!(inb, [prev * 10, prev * 10 + 1], "MPI_Irecv's data");
    assert_eq!(reqs, [null_req; 3], "MPI_Waitall nulls the handles");
    assert_eq!((sts[0].MPI_SOURCE, sts[0].MPI_TAG), (prev, 3), "MPI_Waitall's status");
    let mut count = 0;
    // SAFETY: as above.
    ok(unsafe { ffi::MPI_Get_count(&sts[0], int32, &mut count) }, "MPI_Get_count");
    assert_eq!(count, 2);

    // MPI_Issend + MPI_Irecv completed by MPI_Testall (bounded polling).
    let mut got = [0i64];
    let mine = [me as i64 * 3];
    let mut reqs = [null_req; 2];
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Issend(cp(&mine), 1, int64, next, 4, w, &mut reqs[0]), "MPI_Issend");
        ok(ffi::MPI_Irecv(mp(&mut got), 1, int64, ffi::RSMPI_ANY_SOURCE, 4, w, &mut reqs[1]), "MPI_Irecv");
    }
    let start = std::time::Instant::now();
    loop {
        let mut flag = 0;
        // SAFETY: as above.
        ok(unsafe { ffi::MPI_Testall(2, reqs.as_mut_ptr(), &mut flag, ffi::RSMPI_STATUSES_IGNORE) }, "MPI_Testall");
        if flag == 1 {
            break;
        }
        assert!(reqs.iter().all(|&r| r != null_req), "an incomplete MPI_Testall leaves every handle");
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "MPI_Testall never completed");
        std::thread::yield_now();
    }
    assert_eq!((got[0], reqs), (prev as i64 * 3, [null_req; 2]), "MPI_Testall completes both");
}

/// MPI_Waitany and MPI_Testany, with and without active requests; MPI_Request_free.
fn ffi_waitany_testany(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let int32 = rsmpi!(RSMPI_INT32_T);
    let null_req = rsmpi!(RSMPI_REQUEST_NULL);
    // MPI_Waitany: two receives (from prev, tag 5; from next, tag 6), each completed once.
    let (a, b) = ([me + 1000], [me + 2000]);
    let (mut ga, mut gb) = ([0i32], [0i32]);
    let mut recvs = [null_req; 2];
    let mut sends = [null_req; 2];
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe {
        ok(ffi::MPI_Irecv(mp(&mut ga), 1, int32, prev, 5, w, &mut recvs[0]), "MPI_Irecv");
        ok(ffi::MPI_Irecv(mp(&mut gb), 1, int32, next, 6, w, &mut recvs[1]), "MPI_Irecv");
        ok(ffi::MPI_Isend(cp(&a), 1, int32, next, 5, w, &mut sends[0]), "MPI_Isend");
        ok(ffi::MPI_Isend(cp(&b), 1, int32, prev, 6, w, &mut sends[1]), "MPI_Isend");
    }
    let mut seen = vec![];
    for _ in 0..2 {
        let (mut idx, mut st) = (-1, MPI_Status::default());
        // SAFETY: as above.
        ok(unsafe { ffi::MPI_Waitany(2, recvs.as_mut_ptr(), &mut idx, &mut st) }, "MPI_Waitany");
        assert_eq!(recvs[idx as usize], null_req, "MPI_Waitany nulls the completed handle");
        assert_eq!(st.MPI_TAG, 5 + idx, "MPI_Waitany's status");
        seen.push(idx);
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1]);
    assert_eq!((ga[0], gb[0]), (prev + 1000, next + 2000));
    // MPI_Testany: polled (bounded) until the one receive completes.
    let mut gt = [0i32];
    let mut trs = [null_req, null_req];
    let mut ts = null_req;
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Irecv(mp(&mut gt), 1, int32, prev, 7, w, &mut trs[1]), "MPI_Irecv");
        ok(ffi::MPI_Isend(cp(&a), 1, int32, next, 7, w, &mut ts), "MPI_Isend");
    }
    let start = std::time::Instant::now();
    loop {
        let (mut idx, mut flag, mut st) = (-5, -5, MPI_Status::default());
        // SAFETY: as above.
        ok(unsafe { ffi::MPI_Testany(2, trs.as_mut_ptr(), &mut idx, &mut flag, &mut st) }, "MPI_Testany");
        if flag == 1 {
            assert_eq!((idx, st.MPI_SOURCE, st.MPI_TAG, trs[1]), (1, prev, 7, null_req), "MPI_Testany's completion");
            break;
        }
        assert_eq!((flag, idx), (0, rsmpi!(RSMPI_UNDEFINED)), "MPI_Testany with nothing done");
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "MPI_Testany never completed");
        std::thread::yield_now();
    }
    assert_eq!(gt[0], prev + 1000);
    let (mut idx, mut flag) = (-5, -5);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Testany(2, trs.as_mut_ptr(), &mut idx, &mut flag, ffi::RSMPI_STATUS_IGNORE), "MPI_Testany(none)");
        assert_eq!((flag, idx), (1, ffi::RSMPI_UNDEFINED), "MPI_Testany with no active request");
        ok(ffi::MPI_Wait(&mut ts, ffi::RSMPI_STATUS_IGNORE), "MPI_Wait");
    }
    let mut idx = 0;
    // SAFETY: as above.
    ok(unsafe { ffi::MPI_Waitany(2, recvs.as_mut_ptr(), &mut idx, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Waitany(none)");
    assert_eq!(idx, rsmpi!(RSMPI_UNDEFINED), "no active request");
    // SAFETY: as above.
    ok(unsafe { ffi::MPI_Waitall(2, sends.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE) }, "MPI_Waitall(sends)");

    // MPI_Request_free of an active send: it still arrives.
    static FREED: [i32; 1] = [77];
    let mut r = null_req;
    // SAFETY: a static buffer.
    unsafe {
        ok(ffi::MPI_Isend(cp(&FREED), 1, int32, next, 8, w, &mut r), "MPI_Isend");
        ok(ffi::MPI_Request_free(&mut r), "MPI_Request_free");
    }
    assert_eq!(r, null_req);
    let mut v = [0i32];
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Recv(mp(&mut v), 1, int32, prev, 8, w, ffi::RSMPI_STATUS_IGNORE), "MPI_Recv");
        assert_eq!(ffi::MPI_Wait(&mut r, ffi::RSMPI_STATUS_IGNORE), OK, "waiting for the null request");
        let mut bogus = ffi::RSMPI_REQUEST_NULL;
        assert_eq!(ffi::MPI_Request_free(&mut bogus), ffi::MPI_ERR_REQUEST as c_int, "freeing the null request");
    }
    assert_eq!(v[0], 77, "a freed send's data");
}

/// MPI_Probe and MPI_Iprobe as probe_with_tag; MPI_Sendrecv as send_receive; MPI_Ssend.
fn ffi_probes_and_sendrecv(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let int32 = rsmpi!(RSMPI_INT32_T);
    let int64 = rsmpi!(RSMPI_INT64_T);
    let null_req = rsmpi!(RSMPI_REQUEST_NULL);
    // Probes: against Source::probe_with_tag's answers.
    let data: Vec<i64> = (0..=me as i64).collect();
    let mut sr = null_req;
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe { ok(ffi::MPI_Isend(cp(&data), me + 1, int64, next, 9, w, &mut sr), "MPI_Isend") };
    let mut count = 0;
    let mut st = MPI_Status::default();
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Probe(ffi::RSMPI_ANY_SOURCE, 9, w, &mut st), "MPI_Probe");
        ok(ffi::MPI_Get_count(&st, int64, &mut count), "MPI_Get_count(probe)");
    }
    let rust = world.any_process().probe_with_tag(9);
    assert_eq!(
        (st.MPI_SOURCE, st.MPI_TAG, count),
        (rust.source_rank(), rust.tag(), rust.count(i64::equivalent_datatype())),
        "MPI_Probe as probe_with_tag"
    );
    assert_eq!((st.MPI_SOURCE, count), (prev, prev + 1));
    let (mut flag, mut st2) = (0, MPI_Status::default());
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Iprobe(prev, ffi::RSMPI_ANY_TAG, w, &mut flag, &mut st2), "MPI_Iprobe") };
    assert_eq!((flag, st2.MPI_SOURCE, st2.MPI_TAG), (1, prev, 9), "MPI_Iprobe of a message that is there");
    let mut all = vec![0i64; n as usize];
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Recv(mp(&mut all), n, int64, prev, 9, w, ffi::RSMPI_STATUS_IGNORE), "MPI_Recv");
        ok(ffi::MPI_Iprobe(prev, 9, w, &mut flag, &mut st2), "MPI_Iprobe");
    }
    assert_eq!(flag, 0, "nothing left to probe");
    assert_eq!(&all[..=prev as usize], &(0..=prev as i64).collect::<Vec<_>>()[..]);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Wait(&mut sr, ffi::RSMPI_STATUS_IGNORE), "MPI_Wait");
        ok(ffi::MPI_Probe(ffi::RSMPI_PROC_NULL, 0, w, &mut st), "MPI_Probe(PROC_NULL)");
        assert_eq!(ffi::MPI_Probe(n, 0, w, &mut st), ffi::MPI_ERR_RANK as c_int);
    }
    assert_eq!(st.MPI_SOURCE, rsmpi!(RSMPI_PROC_NULL));

    // MPI_Sendrecv against send_receive; MPI_Ssend.
    let (rv, rst): (i32, Status) =
        mpi::point_to_point::send_receive(&(me * 7), &world.process_at_rank(next), &world.process_at_rank(prev));
    let (x, mut y) = ([me * 7], [0i32]);
    // SAFETY: as above.
    unsafe {
        ok(
            ffi::MPI_Sendrecv(cp(&x), 1, int32, next, 0, mp(&mut y), 1, int32, prev, ffi::RSMPI_ANY_TAG, w, &mut st),
            "MPI_Sendrecv",
        )
    };
    assert_eq!((y[0], st.MPI_SOURCE), (rv, rst.source_rank()), "MPI_Sendrecv as send_receive");
    let mut z = [0i32];
    // SAFETY: as above (even ranks send first: no cycle of synchronous sends).
    unsafe {
        if me % 2 == 0 {
            ok(ffi::MPI_Ssend(cp(&x), 1, int32, next, 11, w), "MPI_Ssend");
        }
        ok(ffi::MPI_Recv(mp(&mut z), 1, int32, prev, 11, w, ffi::RSMPI_STATUS_IGNORE), "MPI_Recv");
        if me % 2 == 1 {
            ok(ffi::MPI_Ssend(cp(&x), 1, int32, next, 11, w), "MPI_Ssend");
        }
    }
    assert_eq!(z[0], prev * 7);
}

/// MPI_Gather, MPI_Scatter and MPI_Reduce from every root, with RSMPI_IN_PLACE, as the Rust API's.
fn ffi_rooted_collectives(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let int32 = rsmpi!(RSMPI_INT32_T);
    let int64 = rsmpi!(RSMPI_INT64_T);
    let sum = rsmpi!(RSMPI_SUM);
    let in_place = rsmpi!(RSMPI_IN_PLACE);
    // Gathering collectives against the Rust API's, from every root; RSMPI_IN_PLACE.
    for root in 0..n {
        let mine = [me, me * 2];
        let mut rust = vec![0i32; 2 * n as usize];
        let mut c = vec![0i32; 2 * n as usize];
        if me == root {
            world.process_at_rank(root).gather_into_root(&mine[..], &mut rust[..]);
        } else {
            world.process_at_rank(root).gather_into(&mine[..]);
        }
        // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
        // outlive their requests (each is completed before its buffer goes).
        unsafe { ok(ffi::MPI_Gather(cp(&mine), 2, int32, mp(&mut c), 2, int32, root, w), "MPI_Gather") };
        if me == root {
            assert_eq!(c, rust, "MPI_Gather at {root}");
            let mut c2 = vec![-1i32; 2 * n as usize];
            c2[2 * me as usize..2 * me as usize + 2].copy_from_slice(&mine);
            // SAFETY: as above.
            unsafe { ok(ffi::MPI_Gather(in_place, 2, int32, mp(&mut c2), 2, int32, root, w), "MPI_Gather(IN_PLACE)") };
            assert_eq!(c2, rust, "MPI_Gather with RSMPI_IN_PLACE at {root}");
        } else {
            // SAFETY: as above.
            unsafe { ok(ffi::MPI_Gather(cp(&mine), 2, int32, mp(&mut c), 2, int32, root, w), "MPI_Gather") };
        }
        let all: Vec<i64> = (0..3 * n as i64).map(|i| i * 5 + root as i64).collect();
        let mut rust = [0i64; 3];
        let mut c = [0i64; 3];
        if me == root {
            world.process_at_rank(root).scatter_into_root(&all[..], &mut rust[..]);
        } else {
            world.process_at_rank(root).scatter_into(&mut rust[..]);
        }
        // SAFETY: as above.
        unsafe { ok(ffi::MPI_Scatter(cp(&all), 3, int64, mp(&mut c), 3, int64, root, w), "MPI_Scatter") };
        assert_eq!(c, rust, "MPI_Scatter from {root}");
        let mut untouched = [9i64; 3];
        // SAFETY: as above.
        unsafe {
            let r = if me == root { in_place } else { mp(&mut untouched) };
            ok(ffi::MPI_Scatter(cp(&all), 3, int64, r, 3, int64, root, w), "MPI_Scatter(IN_PLACE)")
        };
        if me != root {
            assert_eq!(untouched, rust, "MPI_Scatter beside a root's RSMPI_IN_PLACE");
        }
        // MPI_Reduce with RSMPI_IN_PLACE at the root.
        let mut acc = [me as i64 + 1];
        let contrib = [me as i64 + 1];
        // SAFETY: as above.
        unsafe {
            let s = if me == root { in_place as *const c_void } else { cp(&contrib) };
            ok(ffi::MPI_Reduce(s, mp(&mut acc), 1, int64, sum, root, w), "MPI_Reduce(IN_PLACE)")
        };
        if me == root {
            assert_eq!(acc[0], (n as i64) * (n as i64 + 1) / 2, "MPI_Reduce with RSMPI_IN_PLACE");
        }
    }
}

/// MPI_Allgather, MPI_Alltoall, MPI_Scan, MPI_Exscan and MPI_Allreduce (with RSMPI_IN_PLACE) as the
/// Rust API's.
fn ffi_collectives_in_place(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let next = (me + 1) % n;
    let int32 = rsmpi!(RSMPI_INT32_T);
    let int64 = rsmpi!(RSMPI_INT64_T);
    let sum = rsmpi!(RSMPI_SUM);
    let in_place = rsmpi!(RSMPI_IN_PLACE);
    let mine = [me * 3, -me];
    let mut rust = vec![0i32; 2 * n as usize];
    world.all_gather_into(&mine[..], &mut rust[..]);
    let mut c = vec![0i32; 2 * n as usize];
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe { ok(ffi::MPI_Allgather(cp(&mine), 2, int32, mp(&mut c), 2, int32, w), "MPI_Allgather") };
    assert_eq!(c, rust, "MPI_Allgather");
    let mut c2 = vec![0i32; 2 * n as usize];
    c2[2 * me as usize..2 * me as usize + 2].copy_from_slice(&mine);
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Allgather(in_place, 2, int32, mp(&mut c2), 2, int32, w), "MPI_Allgather(IN_PLACE)") };
    assert_eq!(c2, rust, "MPI_Allgather with RSMPI_IN_PLACE");
    let send: Vec<i32> = (0..n).map(|j| me * 100 + j).collect();
    let mut rust = vec![0i32; n as usize];
    world.all_to_all_into(&send[..], &mut rust[..]);
    let mut c = vec![0i32; n as usize];
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Alltoall(cp(&send), 1, int32, mp(&mut c), 1, int32, w), "MPI_Alltoall") };
    assert_eq!(c, rust, "MPI_Alltoall");
    assert_eq!(c, (0..n).map(|j| j * 100 + me).collect::<Vec<_>>());
    let x = [me as i64 + 1, 2];
    let mut rust = [0i64; 2];
    world.scan_into(&x[..], &mut rust[..], SystemOperation::sum());
    let mut c = [0i64; 2];
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Scan(cp(&x), mp(&mut c), 2, int64, sum, w), "MPI_Scan") };
    assert_eq!(c, rust, "MPI_Scan");
    let mut c2 = x;
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Scan(in_place, mp(&mut c2), 2, int64, sum, w), "MPI_Scan(IN_PLACE)") };
    assert_eq!(c2, rust, "MPI_Scan with RSMPI_IN_PLACE");
    let mut rust = [0i64; 2];
    world.exclusive_scan_into(&x[..], &mut rust[..], SystemOperation::sum());
    let mut c = [0i64; 2];
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Exscan(cp(&x), mp(&mut c), 2, int64, sum, w), "MPI_Exscan") };
    if me > 0 {
        assert_eq!(c, rust, "MPI_Exscan");
        assert_eq!(c, [me as i64 * (me as i64 + 1) / 2, 2 * me as i64]);
    } else {
        assert_eq!(c, [0, 0], "MPI_Exscan leaves rank 0's buffer alone");
    }
    let mut c3 = [me as i64];
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Allreduce(in_place, mp(&mut c3), 1, int64, sum, w), "MPI_Allreduce(IN_PLACE)") };
    assert_eq!(c3[0], (n * (n - 1) / 2) as i64, "MPI_Allreduce with RSMPI_IN_PLACE");
    // SAFETY: as above; RSMPI_IN_PLACE is no buffer for a send.
    unsafe {
        assert_eq!(
            ffi::MPI_Send(in_place, 1, int32, next, 0, w),
            ffi::MPI_ERR_BUFFER as c_int,
            "RSMPI_IN_PLACE in MPI_Send"
        );
    }
}

/// The group constructors and MPI_Comm_create as the Rust API's.
fn ffi_group_constructors(world: &SimpleCommunicator) {
    let n = world.size();
    let w = world.as_raw();
    let int32 = rsmpi!(RSMPI_INT32_T);
    let sum = rsmpi!(RSMPI_SUM);
    // Group constructors against the Rust API's groups.
    let rg = world.group();
    let mut g = rsmpi!(RSMPI_GROUP_NULL);
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe { ok(ffi::MPI_Comm_group(w, &mut g), "MPI_Comm_group") };
    let same = |h: MPI_Group, rust: &mpi::topology::UserGroup, what: &str| {
        let mut rel = -1;
        // SAFETY: live handles; `rel` a live local.
        ok(unsafe { ffi::MPI_Group_compare(h, rust.as_raw(), &mut rel) }, "MPI_Group_compare");
        assert_eq!(rel, rsmpi!(RSMPI_IDENT), "{what} as the Rust API's");
    };
    let pick = [n - 1, 0];
    let (mut gi, mut ge, mut gu, mut gn, mut gd) = (g, g, g, g, g);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Group_incl(g, 2, pick.as_ptr(), &mut gi), "MPI_Group_incl");
        ok(ffi::MPI_Group_excl(g, 1, pick.as_ptr(), &mut ge), "MPI_Group_excl");
        ok(ffi::MPI_Group_union(ge, gi, &mut gu), "MPI_Group_union");
        ok(ffi::MPI_Group_intersection(ge, gi, &mut gn), "MPI_Group_intersection");
        ok(ffi::MPI_Group_difference(g, ge, &mut gd), "MPI_Group_difference");
    }
    let (ri, re) = (rg.include(&pick), rg.exclude(&pick[..1]));
    same(gi, &ri, "MPI_Group_incl");
    same(ge, &re, "MPI_Group_excl");
    same(gu, &re.union(&ri), "MPI_Group_union");
    same(gn, &re.intersection(&ri), "MPI_Group_intersection");
    same(gd, &rg.difference(&re), "MPI_Group_difference");
    let mut empty = g;
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Group_difference(gi, g, &mut empty), "MPI_Group_difference(empty)");
        assert_eq!(empty, ffi::RSMPI_GROUP_EMPTY, "an empty result is RSMPI_GROUP_EMPTY");
        let bad = [0, n];
        assert_eq!(
            ffi::MPI_Group_incl(g, 2, bad.as_ptr(), &mut empty),
            ffi::MPI_ERR_RANK as c_int,
            "a rank out of range"
        );
        let twice = [0, 0];
        assert_eq!(ffi::MPI_Group_incl(g, 2, twice.as_ptr(), &mut empty), ffi::MPI_ERR_RANK as c_int, "a rank twice");
    }
    // MPI_Comm_create of the group without rank 0, against split_by_subgroup_collective.
    let rust = world.split_by_subgroup_collective(&re);
    let mut nc = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Comm_create(w, ge, &mut nc), "MPI_Comm_create") };
    assert_eq!(nc == rsmpi!(RSMPI_COMM_NULL), rust.is_none(), "MPI_Comm_create's members");
    if let Some(rc) = rust {
        let (mut s, mut r) = (0, 0);
        // SAFETY: as above.
        unsafe {
            ok(ffi::MPI_Comm_size(nc, &mut s), "MPI_Comm_size");
            ok(ffi::MPI_Comm_rank(nc, &mut r), "MPI_Comm_rank");
            let one = [1i32];
            let mut tot = [0i32];
            ok(ffi::MPI_Allreduce(cp(&one), mp(&mut tot), 1, int32, sum, nc), "MPI_Allreduce(created)");
            assert_eq!(tot[0], n - 1, "traffic on a created communicator");
            ok(ffi::MPI_Comm_free(&mut nc), "MPI_Comm_free");
        }
        assert_eq!((s, r), (rc.size(), rc.rank()), "MPI_Comm_create as split_by_subgroup_collective");
    }
    // SAFETY: as above.
    unsafe {
        for h in [&mut g, &mut gi, &mut ge, &mut gu, &mut gn, &mut gd] {
            ok(ffi::MPI_Group_free(h), "MPI_Group_free");
        }
    }
}

/// MPI_Type_contiguous and MPI_Type_vector as UserDatatype's; a vector sent as plain i32s.
fn ffi_datatype_constructors(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let w = world.as_raw();
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let int32 = rsmpi!(RSMPI_INT32_T);
    let int64 = rsmpi!(RSMPI_INT64_T);
    // Datatype constructors against UserDatatype's.
    let (mut t3, mut tv) = (rsmpi!(RSMPI_DATATYPE_NULL), rsmpi!(RSMPI_DATATYPE_NULL));
    let (mut s3, mut sv) = (0, 0);
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe {
        ok(ffi::MPI_Type_contiguous(3, int64, &mut t3), "MPI_Type_contiguous");
        ok(ffi::MPI_Type_vector(2, 1, 2, int32, &mut tv), "MPI_Type_vector");
        ok(ffi::MPI_Type_commit(&mut t3), "MPI_Type_commit");
        ok(ffi::MPI_Type_commit(&mut tv), "MPI_Type_commit");
        ok(ffi::MPI_Type_size(t3, &mut s3), "MPI_Type_size");
        ok(ffi::MPI_Type_size(tv, &mut sv), "MPI_Type_size");
    }
    use mpi::datatype::DatatypeInfo;
    assert_eq!(s3, UserDatatype::contiguous(3, &i64::equivalent_datatype()).size(), "MPI_Type_contiguous's size");
    let rv = UserDatatype::vector(2, 1, 2, &i32::equivalent_datatype());
    assert_eq!(sv, rv.size(), "MPI_Type_vector's size");
    // SAFETY: `tv` names a live layout, alive while `dv` is used.
    let dv: mpi::datatype::DatatypeRef<'_> = unsafe { FromRaw::from_raw(tv) };
    assert_eq!(dv.extent(), rv.extent(), "MPI_Type_vector's extent");
    // A vector sent, received as plain i32s: every other element.
    let mut st = MPI_Status::default();
    let src = [me, -1, me + 1, -2];
    let mut dst = [0i32; 2];
    // SAFETY: as above: `src` holds one vector element, `dst` two i32s.
    unsafe {
        ok(
            ffi::MPI_Sendrecv(cp(&src), 1, tv, next, 12, mp(&mut dst), 2, int32, prev, 12, w, &mut st),
            "MPI_Sendrecv(vector)",
        )
    };
    assert_eq!(dst, [prev, prev + 1], "a vector's elements");
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Type_free(&mut t3), "MPI_Type_free");
        ok(ffi::MPI_Type_free(&mut tv), "MPI_Type_free");
        assert_eq!(t3, ffi::RSMPI_DATATYPE_NULL);
        let mut t = int32;
        assert_eq!(ffi::MPI_Type_free(&mut t), ffi::MPI_ERR_TYPE as c_int, "a predefined datatype is not freed");
        assert_eq!(ffi::MPI_Type_contiguous(-1, int32, &mut t), ffi::MPI_ERR_COUNT as c_int);
    }
}

/// MPI_Cart_* and MPI_Dims_create as CartesianCommunicator's answers.
fn ffi_cartesian(world: &SimpleCommunicator) {
    let n = world.size();
    let w = world.as_raw();
    // Cartesian topologies against CartesianCommunicator's answers.
    let mut dims = [0, 0];
    // SAFETY: (so for every ffi call of this function) live locals and handles, buffers that
    // outlive their requests (each is completed before its buffer goes).
    unsafe { ok(ffi::MPI_Dims_create(n, 2, dims.as_mut_ptr()), "MPI_Dims_create") };
    assert_eq!(dims, [n, 1], "MPI_Dims_create of a prime");
    let periods = [1, 0];
    let mut cart = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Cart_create(w, 2, dims.as_ptr(), periods.as_ptr(), 0, &mut cart), "MPI_Cart_create") };
    let rc = world.create_cartesian_communicator(&dims, &[true, false], false).expect("all ranks in the grid");
    let mut topo = 0;
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Topo_test(cart, &mut topo), "MPI_Topo_test") };
    assert_eq!(topo, rsmpi!(RSMPI_CART));
    for r in 0..n {
        let mut xy = [-1, -1];
        let mut back = -1;
        // SAFETY: as above.
        unsafe {
            ok(ffi::MPI_Cart_coords(cart, r, 2, xy.as_mut_ptr()), "MPI_Cart_coords");
            ok(ffi::MPI_Cart_rank(cart, xy.as_ptr(), &mut back), "MPI_Cart_rank");
        }
        assert_eq!(xy.to_vec(), rc.rank_to_coordinates(r), "MPI_Cart_coords of {r}");
        assert_eq!(back, rc.coordinates_to_rank(&xy), "MPI_Cart_rank of {r}");
        assert_eq!(back, r);
    }
    let wrapped = [n + 1, 0];
    let mut wr = -1;
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Cart_rank(cart, wrapped.as_ptr(), &mut wr), "MPI_Cart_rank(periodic)") };
    assert_eq!(wr, rc.coordinates_to_rank(&wrapped), "a periodic coordinate wraps");
    for (dim, disp) in [(0, 1), (0, -1), (0, 2), (1, 1)] {
        let (mut s, mut d) = (-5, -5);
        // SAFETY: as above.
        unsafe { ok(ffi::MPI_Cart_shift(cart, dim, disp, &mut s, &mut d), "MPI_Cart_shift") };
        let (rs, rd) = rc.shift(dim, disp);
        let pn = rsmpi!(RSMPI_PROC_NULL);
        assert_eq!((s, d), (rs.unwrap_or(pn), rd.unwrap_or(pn)), "MPI_Cart_shift({dim}, {disp})");
    }
    let keep = [1, 0];
    let mut sub = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Cart_sub(cart, keep.as_ptr(), &mut sub), "MPI_Cart_sub") };
    let rsub = rc.subgroup(&[true, false]);
    let (mut ss, mut sr) = (0, 0);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_size(sub, &mut ss), "MPI_Comm_size(sub)");
        ok(ffi::MPI_Comm_rank(sub, &mut sr), "MPI_Comm_rank(sub)");
        ok(ffi::MPI_Topo_test(sub, &mut topo), "MPI_Topo_test(sub)");
    }
    assert_eq!((ss, sr, topo), (rsub.size(), rsub.rank(), rsmpi!(RSMPI_CART)), "MPI_Cart_sub as subgroup");
    let (mut nd, mut gd, mut gp, mut gc) = (0, [0; 2], [0; 2], [0; 2]);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Cartdim_get(cart, &mut nd), "MPI_Cartdim_get");
        ok(ffi::MPI_Cart_get(cart, 2, gd.as_mut_ptr(), gp.as_mut_ptr(), gc.as_mut_ptr()), "MPI_Cart_get");
    }
    let l = rc.get_layout();
    assert_eq!(nd, rc.num_dimensions(), "MPI_Cartdim_get");
    assert_eq!(
        (gd.to_vec(), gp.iter().map(|&p| p != 0).collect::<Vec<_>>(), gc.to_vec()),
        (l.dims, l.periods, l.coords),
        "MPI_Cart_get as get_layout"
    );
    // SAFETY: as above.
    unsafe {
        let mut xy = [0, 0];
        assert_eq!(ffi::MPI_Cart_coords(w, 0, 2, xy.as_mut_ptr()), ffi::MPI_ERR_COMM as c_int, "no layout");
        let big = [n + 1, 1];
        let mut none = w;
        assert_eq!(
            ffi::MPI_Cart_create(w, 2, big.as_ptr(), periods.as_ptr(), 0, &mut none),
            ffi::MPI_ERR_ARG as c_int,
            "a grid larger than the communicator"
        );
        ok(ffi::MPI_Comm_free(&mut sub), "MPI_Comm_free(sub)");
        ok(ffi::MPI_Comm_free(&mut cart), "MPI_Comm_free(cart)");
    }
}

// ------------------------------------------------------------------------- keyvals

/// Calls of the C callbacks below: copies and deletes, and the sum of deleted values.
static C_COPIES: AtomicUsize = AtomicUsize::new(0);
static C_DELETES: AtomicUsize = AtomicUsize::new(0);
static C_DELETED_SUM: AtomicI32 = AtomicI32::new(0);

/// Copies the pointer itself (the values are `&'static AtomicI32`s), counting in the extra
/// state (an `AtomicUsize`).
unsafe extern "C" fn c_copy(
    _old: MPI_Comm,
    _key: c_int,
    extra: *mut c_void,
    val_in: *mut c_void,
    val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    C_COPIES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the extra state is a `&'static AtomicUsize` (see `keyvals`); the library
    // passes a writable out pointer and flag.
    unsafe {
        (*(extra as *const AtomicUsize)).fetch_add(1, Ordering::SeqCst);
        *(val_out as *mut *mut c_void) = val_in;
        *flag = 1;
    }
    OK
}

unsafe extern "C" fn c_delete(_comm: MPI_Comm, _key: c_int, val: *mut c_void, _extra: *mut c_void) -> c_int {
    C_DELETES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the values set under this key are `&'static AtomicI32`s.
    let v = unsafe { &*(val as *const AtomicI32) }.load(Ordering::SeqCst);
    C_DELETED_SUM.fetch_add(v, Ordering::SeqCst);
    OK
}

fn keyvals(world: &SimpleCommunicator) {
    static EXTRA: AtomicUsize = AtomicUsize::new(0);
    static A: AtomicI32 = AtomicI32::new(1);
    static B: AtomicI32 = AtomicI32::new(20);
    let mut key = 0;
    // SAFETY: (so for every ffi call of this function) live locals and handles; the
    // callbacks accept the values set (statics).
    unsafe {
        ok(
            ffi::MPI_Comm_create_keyval(
                Some(c_copy),
                Some(c_delete),
                &mut key,
                &EXTRA as *const AtomicUsize as *mut c_void,
            ),
            "MPI_Comm_create_keyval",
        )
    };
    let mut d = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_dup(world.as_raw(), &mut d), "MPI_Comm_dup");
        ok(ffi::MPI_Comm_set_attr(d, key, &A as *const AtomicI32 as *mut c_void), "MPI_Comm_set_attr");
    }
    let mut got: *mut c_void = std::ptr::null_mut();
    let mut flag = 0;
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_get_attr(d, key, &mut got as *mut *mut c_void as *mut c_void, &mut flag), "MPI_Comm_get_attr")
    };
    assert_eq!((flag, got), (1, &A as *const AtomicI32 as *mut c_void), "MPI_Comm_get_attr gives the value set");
    // Replacing runs the delete callback on the old value.
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Comm_set_attr(d, key, &B as *const AtomicI32 as *mut c_void), "MPI_Comm_set_attr") };
    assert_eq!((C_DELETES.load(Ordering::SeqCst), C_DELETED_SUM.load(Ordering::SeqCst)), (1, 1));
    // A duplicate: the copy callback, with the extra state.
    let mut d2 = rsmpi!(RSMPI_COMM_NULL);
    // SAFETY: as above.
    unsafe { ok(ffi::MPI_Comm_dup(d, &mut d2), "MPI_Comm_dup") };
    assert_eq!((C_COPIES.load(Ordering::SeqCst), EXTRA.load(Ordering::SeqCst)), (1, 1));
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_get_attr(d2, key, &mut got as *mut *mut c_void as *mut c_void, &mut flag), "MPI_Comm_get_attr")
    };
    assert_eq!((flag, got), (1, &B as *const AtomicI32 as *mut c_void), "the duplicate's copied value");
    // Deleting, freeing.
    // SAFETY: as above.
    unsafe {
        ok(ffi::MPI_Comm_delete_attr(d, key), "MPI_Comm_delete_attr");
        assert_eq!((C_DELETES.load(Ordering::SeqCst), C_DELETED_SUM.load(Ordering::SeqCst)), (2, 21));
        ok(ffi::MPI_Comm_get_attr(d, key, &mut got as *mut *mut c_void as *mut c_void, &mut flag), "MPI_Comm_get_attr");
        assert_eq!(flag, 0, "a deleted attribute is gone");
        ok(ffi::MPI_Comm_delete_attr(d, key), "MPI_Comm_delete_attr(unset)");
        assert_eq!(C_DELETES.load(Ordering::SeqCst), 2, "deleting an unset attribute calls nothing");
        ok(ffi::MPI_Comm_free(&mut d), "MPI_Comm_free");
        assert_eq!(C_DELETES.load(Ordering::SeqCst), 2);
        // The key freed: values already set keep their callbacks.
        let mut k2 = key;
        ok(ffi::MPI_Comm_free_keyval(&mut k2), "MPI_Comm_free_keyval");
        assert_eq!(k2, ffi::MPI_KEYVAL_INVALID as c_int);
        assert_eq!(
            ffi::MPI_Comm_set_attr(d2, key, &A as *const AtomicI32 as *mut c_void),
            ffi::MPI_ERR_KEYVAL as c_int,
            "a freed key"
        );
        ok(ffi::MPI_Comm_free(&mut d2), "MPI_Comm_free");
        assert_eq!(
            (C_DELETES.load(Ordering::SeqCst), C_DELETED_SUM.load(Ordering::SeqCst)),
            (3, 41),
            "freeing runs the delete callback"
        );
    }
    // A Rust attribute type on a key made by MPI_Comm_create_keyval (rsmpi's foreign keys).
    #[derive(Clone, Debug, PartialEq)]
    struct Foreign(i32);
    static FOREIGN_KEY: AtomicI32 = AtomicI32::new(0);
    impl CommAttribute for Foreign {
        fn get_key() -> mpi::attribute::AttributeKey {
            // SAFETY: the key was made by MPI_Comm_create_keyval below.
            unsafe { mpi::attribute::AttributeKey::new_unchecked(FOREIGN_KEY.load(Ordering::SeqCst)) }
        }
    }
    let mut fk = 0;
    // SAFETY: no callbacks, nothing to free: the values are leaked by design of this check
    // (a foreign key's callbacks are the foreign code's).
    unsafe { ok(ffi::MPI_Comm_create_keyval(None, None, &mut fk, std::ptr::null_mut()), "MPI_Comm_create_keyval") };
    FOREIGN_KEY.store(fk, Ordering::SeqCst);
    let mut c = world.duplicate();
    c.set_attr(Foreign(9));
    assert_eq!(c.get_attr::<Foreign>(), Some(&Foreign(9)));
    let cd = c.duplicate();
    assert_eq!(cd.get_attr::<Foreign>(), None, "no copy callback: not copied");

    // The universe size through its predefined key.
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above.
    unsafe {
        ok(
            ffi::MPI_Comm_get_attr(
                ffi::RSMPI_COMM_WORLD,
                ffi::MPI_UNIVERSE_SIZE as c_int,
                &mut p as *mut *mut c_void as *mut c_void,
                &mut flag,
            ),
            "MPI_Comm_get_attr(MPI_UNIVERSE_SIZE)",
        )
    };
    assert_eq!(flag, 1);
    // SAFETY: the library gives a pointer to a `c_int` for this key.
    let u = unsafe { *(p as *const c_int) };
    assert!(u >= world.size(), "universe size {u}");
    world.barrier();
}

fn topology(world: &SimpleCommunicator) {
    // rsmpi 0.8.1 has only placeholders for graph topologies; none is ever made.
    assert_eq!(world.topology(), Topology::Undefined);
    let d = world.duplicate();
    match d.into_topology() {
        IntoTopology::Undefined(c) => assert_eq!(c.size(), world.size()),
        IntoTopology::Graph(_) | IntoTopology::DistributedGraph(_) | IntoTopology::Cartesian(_) => {
            panic!("a plain communicator has no topology")
        }
    }
    let _placeholders: [Topology; 2] = [Topology::Graph, Topology::DistributedGraph];
    world.barrier();
}

/// An intercommunicator through its handle: the parents spawn 2 children of this program
/// (`inter_child`); both sides check the handle's answers, exchange values with `MPI_Send` and
/// `MPI_Recv` on it, run `MPI_Barrier` and `MPI_Allreduce` over it, and merge the
/// intercommunicators made by `from_raw` (both `Low`: the parents come first, so a
/// from_raw'd intercommunicator keeps its side).
fn inter(world: &SimpleCommunicator) {
    let n = world.size();
    let me = world.rank();
    let cmd = {
        let mut c = std::process::Command::new(std::env::current_exe().expect("this program"));
        c.arg("inter_child");
        c
    };
    let child = world.process_at_rank(0).spawn(&cmd, 2).expect("spawn");
    let h = child.as_raw();
    inter_side(h, me, n, 2);
    // SAFETY: `h` names `child`, alive here.
    let again = unsafe { mpi::topology::InterCommunicator::from_raw(h) };
    let merged = again.merge(mpi::topology::MergeOrder::Low);
    assert_eq!((merged.size(), merged.rank()), (n + 2, me), "the parents first in the merge");
    world.barrier();
}

/// One side's checks of an intercommunicator handle `h`: this process is `me` of `n` in its
/// group, the other group has `remote`.
fn inter_side(h: MPI_Comm, me: Rank, n: Rank, remote: Rank) {
    let (mut flag, mut rs, mut s, mut r) = (0, 0, 0, 0);
    // SAFETY: live locals, a live handle.
    unsafe {
        ok(ffi::MPI_Comm_test_inter(h, &mut flag), "MPI_Comm_test_inter");
        ok(ffi::MPI_Comm_remote_size(h, &mut rs), "MPI_Comm_remote_size");
        ok(ffi::MPI_Comm_size(h, &mut s), "MPI_Comm_size(inter)");
        ok(ffi::MPI_Comm_rank(h, &mut r), "MPI_Comm_rank(inter)");
    }
    assert_eq!((flag, rs, s, r), (1, remote, n, me), "an intercommunicator's handle");
    // Every process sends its rank + 100 to every remote process, then receives from any.
    let mine = [me + 100];
    let mut got = vec![];
    for dest in 0..remote {
        // SAFETY: one i32 from a live local; a live handle.
        unsafe {
            ok(ffi::MPI_Send(mine.as_ptr() as *const c_void, 1, ffi::RSMPI_INT32_T, dest, 5, h), "MPI_Send(inter)")
        };
    }
    for _ in 0..remote {
        let mut v = [0i32];
        let mut st = MPI_Status::default();
        // SAFETY: one i32 into a live local; a live handle.
        unsafe {
            ok(
                ffi::MPI_Recv(
                    v.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_INT32_T,
                    ffi::RSMPI_ANY_SOURCE,
                    5,
                    h,
                    &mut st,
                ),
                "MPI_Recv(inter)",
            )
        };
        assert_eq!(v[0], st.MPI_SOURCE + 100, "a value from remote rank {}", st.MPI_SOURCE);
        got.push(st.MPI_SOURCE);
    }
    got.sort_unstable();
    assert_eq!(got, (0..remote).collect::<Vec<_>>(), "one value from each remote process");
    let one = [1i32];
    let mut sum = [0i32];
    // SAFETY: live locals, a live handle.
    unsafe {
        ok(ffi::MPI_Barrier(h), "MPI_Barrier(inter)");
        ok(
            ffi::MPI_Allreduce(
                one.as_ptr() as *const c_void,
                sum.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_INT32_T,
                ffi::RSMPI_SUM,
                h,
            ),
            "MPI_Allreduce(inter)",
        );
    }
    assert_eq!(sum[0], remote, "an allreduce over an intercommunicator gives the other group's sum");
}

fn inter_child(world: &SimpleCommunicator, parent: &mpi::topology::InterCommunicator) {
    let h = parent.as_raw();
    inter_side(h, world.rank(), world.size(), parent.remote_size());
    // SAFETY: `h` names `parent`, alive here.
    let again = unsafe { mpi::topology::InterCommunicator::from_raw(h) };
    let merged = again.merge(mpi::topology::MergeOrder::Low);
    assert_eq!(merged.rank(), parent.remote_size() + world.rank(), "the children after the parents");
    println!("inter child {} OK", world.rank());
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(parent) = world.parent() {
        inter_child(&world, &parent);
        return;
    }
    let all = ["handles", "ffi", "callbacks", "keyvals", "topology"];
    let parts: Vec<&str> = if args.is_empty() { all.to_vec() } else { args.iter().map(String::as_str).collect() };
    for p in &parts {
        match *p {
            "handles" => handles(&world),
            "ffi" => {
                ffi_calls(&world);
                ffi_more(&world);
            }
            "callbacks" => callbacks(&world),
            "keyvals" => keyvals(&world),
            "topology" => topology(&world),
            "inter" => inter(&world),
            other => panic!("unknown part {other}"),
        }
    }
    world.barrier();
    if world.rank() == 0 {
        println!("OK raw_checks n={} {}", world.size(), parts.join(" "));
    }
}
