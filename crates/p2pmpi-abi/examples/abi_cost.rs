//! The MPICH ABI's own cost per call: the same operations through the exported C functions
//! (`MPI_Comm_rank`, ... by their symbols, as a C program calls them: MPICH handles, MPICH's
//! `MPI_Status`) and through the p2pmpi Rust API, in one process. The difference is what the
//! C layers add (handle translation, argument checks, status conversion, the error handler's
//! dispatch).
//!
//! Run it as one rank: `p2pmpirun --local -n 1 target/release/examples/abi_cost [BATCHES [CALLS]]`.
//! Per operation it prints
//! `abi_cost <op> <abi_ns_per_call> <rust_ns_per_call> <difference_ns>`
//! (medians over BATCHES batches, default 15, of CALLS calls each, default about 10 ms of
//! calls; the two sides alternate batch by batch so that a disturbance of the machine hits
//! both). Under `valgrind --tool=callgrind` the functions `abi_OP` and `rust_OP` hold each
//! side's instructions.
//!
//! The operations: `comm_rank` (`MPI_Comm_rank` of the world: `world.rank()`), `type_size`
//! (`MPI_Type_size` of `MPI_INT`: `i32::equivalent_datatype().size()`), `send_recv_self`
//! (8 bytes sent to oneself by `MPI_Send`, received by `MPI_Recv` with a status), `isend_irecv_test`
//! (`MPI_Irecv` and `MPI_Isend` to oneself, then `MPI_Test` on each until it completed: two
//! requests made, tested, completed and freed, two statuses).
use p2pmpi::datatype::DatatypeInfo;
use p2pmpi::topology::SimpleCommunicator;
use p2pmpi::traits::*;
use p2pmpi_abi::consts::{MPI_COMM_WORLD, MPI_SUCCESS};
use p2pmpi_abi::datatypes::values::{MPI_BYTE, MPI_INT};
use p2pmpi_abi::status::MPI_Status as Status;
use std::hint::black_box;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

// The functions exported by the library (this program links its rlib, whose symbols these
// are): called as a C program calls them.
extern "C" {
    fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut i8) -> c_int;
    fn MPI_Finalize() -> c_int;
    fn MPI_Comm_rank(comm: c_int, rank: *mut c_int) -> c_int;
    fn MPI_Type_size(dt: c_int, size: *mut c_int) -> c_int;
    fn MPI_Send(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, comm: c_int) -> c_int;
    fn MPI_Recv(
        buf: *mut c_void,
        count: c_int,
        dt: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        status: *mut Status,
    ) -> c_int;
    fn MPI_Isend(
        buf: *const c_void,
        count: c_int,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        comm: c_int,
        req: *mut c_int,
    ) -> c_int;
    fn MPI_Irecv(
        buf: *mut c_void,
        count: c_int,
        dt: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        req: *mut c_int,
    ) -> c_int;
    fn MPI_Test(req: *mut c_int, flag: *mut c_int, status: *mut Status) -> c_int;
}

/// Nanoseconds per call of `f` (which makes `n` calls) over one batch.
fn batch(n: u64, f: &mut dyn FnMut(u64)) -> f64 {
    let t0 = Instant::now();
    f(n);
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let k = v.len();
    if k % 2 == 1 {
        v[k / 2]
    } else {
        (v[k / 2 - 1] + v[k / 2]) / 2.0
    }
}

/// How to measure: `batches` batches of `calls` calls each (`None`: about 10 ms of the
/// slower side, found on a short trial).
struct Plan {
    batches: usize,
    calls: Option<u64>,
}

/// Measures the ABI's `abi` and the Rust API's `rust` (each makes the calls it is asked
/// for), alternating batches; prints the medians and their difference.
fn compare(op: &str, plan: &Plan, abi: &mut dyn FnMut(u64), rust: &mut dyn FnMut(u64)) {
    let n = plan.calls.unwrap_or_else(|| {
        let trial = batch(1000, abi).max(batch(1000, rust)).max(1.0);
        ((10e6 / trial) as u64).clamp(100, 10_000_000)
    });
    let (mut a, mut r) = (Vec::new(), Vec::new());
    for i in 0..plan.batches {
        if i % 2 == 0 {
            a.push(batch(n, abi));
            r.push(batch(n, rust));
        } else {
            r.push(batch(n, rust));
            a.push(batch(n, abi));
        }
    }
    let (a, r) = (median(a), median(r));
    println!("abi_cost {op} {a:.1} {r:.1} {:.1}", a - r);
}

fn check(rc: c_int, what: &str) {
    assert_eq!(rc, MPI_SUCCESS, "{what} failed");
}

// Each side of each operation is a function of its own, never inlined, so that a profile
// (valgrind --tool=callgrind) shows the instructions of each per call.

#[inline(never)]
fn abi_comm_rank(n: u64) {
    let mut out: c_int = 0;
    for _ in 0..n {
        // SAFETY: a valid handle and a local to write.
        black_box(unsafe { MPI_Comm_rank(black_box(MPI_COMM_WORLD), &mut out) });
    }
    black_box(out);
}

#[inline(never)]
fn rust_comm_rank(n: u64, world: &SimpleCommunicator) {
    for _ in 0..n {
        black_box(black_box(world).rank());
    }
}

#[inline(never)]
fn abi_type_size(n: u64) {
    let mut out: c_int = 0;
    for _ in 0..n {
        // SAFETY: a predefined datatype and a local to write.
        black_box(unsafe { MPI_Type_size(black_box(MPI_INT), &mut out) });
    }
    black_box(out);
}

#[inline(never)]
fn rust_type_size(n: u64) {
    for _ in 0..n {
        black_box(i32::equivalent_datatype().size());
    }
}

#[inline(never)]
fn abi_send_recv_self(n: u64, me: c_int, x: &[u8; 8], y: &mut [u8; 8]) {
    let mut st = Status::default();
    for _ in 0..n {
        // SAFETY: 8 bytes at `x` and `y`; a valid communicator and rank; `st` a local.
        unsafe {
            check(MPI_Send(x.as_ptr().cast(), 8, MPI_BYTE, me, 1, MPI_COMM_WORLD), "MPI_Send");
            check(MPI_Recv(y.as_mut_ptr().cast(), 8, MPI_BYTE, me, 1, MPI_COMM_WORLD, &mut st), "MPI_Recv");
        }
        black_box(&st);
    }
}

#[inline(never)]
fn rust_send_recv_self(n: u64, world: &SimpleCommunicator, x: &[u8; 8], y: &mut [u8; 8]) {
    let p = world.this_process();
    for _ in 0..n {
        p.send_with_tag(&x[..], 1);
        black_box(p.receive_into_with_tag(&mut y[..], 1));
    }
}

#[inline(never)]
fn abi_isend_irecv_test(n: u64, me: c_int, x: &[u8; 8], y: &mut [u8; 8]) {
    let (mut rr, mut sr, mut flag) = (0, 0, 0);
    let mut st = Status::default();
    for _ in 0..n {
        // SAFETY: as above; the requests complete before `x` and `y` are used again.
        unsafe {
            check(MPI_Irecv(y.as_mut_ptr().cast(), 8, MPI_BYTE, me, 2, MPI_COMM_WORLD, &mut rr), "MPI_Irecv");
            check(MPI_Isend(x.as_ptr().cast(), 8, MPI_BYTE, me, 2, MPI_COMM_WORLD, &mut sr), "MPI_Isend");
            for r in [&mut sr, &mut rr] {
                loop {
                    check(MPI_Test(r, &mut flag, &mut st), "MPI_Test");
                    if flag != 0 {
                        break;
                    }
                }
            }
        }
        black_box(&st);
    }
}

#[inline(never)]
fn rust_isend_irecv_test(n: u64, world: &SimpleCommunicator, x: &[u8; 8], y: &mut [u8; 8]) {
    let p = world.this_process();
    for _ in 0..n {
        p2pmpi::request::scope(|s| {
            let mut rr = p.immediate_receive_into_with_tag(s, &mut y[..], 2);
            let mut sr = p.immediate_send_with_tag(s, &x[..], 2);
            let st = loop {
                match sr.test() {
                    Ok(st) => break st,
                    Err(r) => sr = r,
                }
            };
            black_box(st);
            let st = loop {
                match rr.test() {
                    Ok(st) => break st,
                    Err(r) => rr = r,
                }
            };
            black_box(st);
        });
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let batches = args.next().map_or(15, |s| s.parse().expect("BATCHES: a number"));
    let calls = args.next().map(|s| s.parse().expect("CALLS: a number"));
    let plan = Plan { batches, calls };
    // SAFETY: null arguments are allowed (MPI-2).
    check(unsafe { MPI_Init(std::ptr::null_mut(), std::ptr::null_mut()) }, "MPI_Init");
    let world = SimpleCommunicator::world();
    let me = world.rank();

    compare("comm_rank", &plan, &mut abi_comm_rank, &mut |n| rust_comm_rank(n, &world));
    compare("type_size", &plan, &mut abi_type_size, &mut rust_type_size);
    let x = [7u8; 8];
    // One receive buffer per side: both closures live at once.
    let (mut y, mut z) = ([0u8; 8], [0u8; 8]);
    compare("send_recv_self", &plan, &mut |n| abi_send_recv_self(n, me, &x, &mut y), &mut |n| {
        rust_send_recv_self(n, &world, &x, &mut z)
    });
    assert_eq!((y, z), (x, x), "the messages arrived");
    (y, z) = ([0; 8], [0; 8]);
    compare("isend_irecv_test", &plan, &mut |n| abi_isend_irecv_test(n, me, &x, &mut y), &mut |n| {
        rust_isend_irecv_test(n, &world, &x, &mut z)
    });
    assert_eq!((y, z), (x, x), "the immediate messages arrived");
    drop(world);
    // SAFETY: initialized above; nothing uses the library after this.
    check(unsafe { MPI_Finalize() }, "MPI_Finalize");
}
