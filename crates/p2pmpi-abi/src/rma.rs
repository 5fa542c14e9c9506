//! One-sided communication (windows) over point-to-point: `MPI_Win_create`,
//! `MPI_Win_allocate`, `MPI_Win_free`, `MPI_Win_fence`, `MPI_Put`, `MPI_Get`,
//! `MPI_Accumulate`, `MPI_Win_lock`/`MPI_Win_unlock`, `MPI_Win_lock_all`/`MPI_Win_unlock_all`,
//! `MPI_Win_flush` (`_all`, `_local`, `_local_all`), `MPI_Win_sync`, `MPI_Win_get_group`,
//! `MPI_Win_get_attr` (`MPI_WIN_BASE`, `MPI_WIN_SIZE`, `MPI_WIN_DISP_UNIT`,
//! `MPI_WIN_CREATE_FLAVOR`, `MPI_WIN_MODEL`), and the large-count forms `MPI_Win_create_c`,
//! `MPI_Win_allocate_c`, `MPI_Put_c`, `MPI_Get_c`, `MPI_Accumulate_c`; `MPI_Win_set_errhandler`
//! and `MPI_Win_get_errhandler` with the predefined handlers (recorded; an error on a window
//! goes to its communicator's handler); `MPI_Win_set_name`, `MPI_Win_get_name`,
//! `MPI_Win_set_info` (hints accepted, unused) and `MPI_Win_get_info` (none); the atomic
//! `MPI_Get_accumulate`, `MPI_Fetch_and_op` and `MPI_Compare_and_swap` (served like a get:
//! the target's old data answered, then updated, in one step of its server); dynamic windows
//! (`MPI_Win_create_dynamic`, `MPI_Win_attach`, `MPI_Win_detach`: a displacement is an
//! address at the target, whose server checks it against the memory attached). The
//! request-based operations are in [`crate::win_request`], shared-memory windows in
//! [`crate::win_shared`], general active target synchronization in [`crate::win_pscw`].
//!
//! **How it works.** A window has a private duplicate of its communicator. An operation is a
//! request message from the origin to the target (tag [`TAG_REQ`]): a header and, for a put
//! or an accumulate, the origin's data packed. The target's **server** applies it to the
//! window's memory and answers (tag [`TAG_REPLY`]): an acknowledgement for a put or an
//! accumulate, the data for a get (received straight into the origin's buffer with the
//! origin's datatype). The origin posts the receive of each answer when it starts the
//! operation; `MPI_Win_flush` waits for them, so a flushed operation is applied at the
//! target. `MPI_Win_fence` is a flush of every operation and a barrier: after it every
//! operation of the epoch, by any process, is applied. Passive target: `MPI_Win_lock` asks
//! the target's server for the lock (shared or exclusive, granted in order of arrival) and
//! waits for the grant; `MPI_Win_unlock` flushes, then releases.
//!
//! **Progress.** Each process that has windows runs one server thread, which polls the
//! windows' private communicators (`MPI_Iprobe`) and serves the requests: a target need not
//! call MPI for its window to be served (it may compute, or wait in a blocking call, as
//! well). The server polls without pause while requests come, and backs off to a poll every
//! millisecond when idle; while the target's own thread waits in a blocking call, a request
//! may wait up to one of the library's blocking slices (50 ms, 2 ms under
//! `MPI_THREAD_MULTIPLE`) for the engine.
//!
//! **Limits.** The target datatype is a predefined one without holes (the origin's may be
//! any committed datatype); `MPI_REPLACE` and `MPI_NO_OP` work in `MPI_Accumulate` with the
//! predefined operations; asserts are accepted and not used; epochs are not checked
//! (`MPI_ERR_RMA_SYNC` is never raised). Errors go to the handler of the communicator the
//! window was made from.

use crate::consts::*;
use crate::datatypes::values::{MPI_BYTE, MPI_INT};
use crate::datatypes::{datatype, datatype_ref, predefined, stageable, MPI_Aint, MPI_Count};
use crate::handles::{comm, new_group, object, rust_comm, Slab};
use crate::{ok, put};
use p2pmpi::datatype::{DynBuffer, DynBufferMut};
use p2pmpi::ffi;
use p2pmpi::traits::*;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

/// `MPI_WIN_NULL`.
pub const MPI_WIN_NULL: c_int = 0x2000_0000;
/// The window attributes' keys.
pub const MPI_WIN_BASE: c_int = 0x6600_0001;
pub const MPI_WIN_SIZE: c_int = 0x6600_0003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
pub const MPI_WIN_MODEL: c_int = 0x6600_0009;
/// Lock types.
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;
/// Flavors and the memory model.
const MPI_WIN_FLAVOR_CREATE: c_int = 1;
const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub(crate) const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub(crate) const MPI_WIN_FLAVOR_SHARED: c_int = 4;
const MPI_WIN_UNIFIED: c_int = 2;
/// `MPI_REPLACE` and `MPI_NO_OP`.
pub(crate) const MPI_REPLACE: c_int = 0x5800_000d;
pub(crate) const MPI_NO_OP: c_int = 0x5800_000e;

/// Tags on a window's private communicator: requests to the server, its answers; the
/// notices of general active target synchronization ([`crate::win_pscw`]): an exposure
/// epoch posted, an access epoch completed.
pub const TAG_REQ: c_int = 1;
pub const TAG_REPLY: c_int = 2;
pub const TAG_POST: c_int = 3;
pub const TAG_DONE: c_int = 4;

/// Kinds of requests.
pub(crate) const PUT: u8 = 1;
const GET: u8 = 2;
pub(crate) const ACC: u8 = 3;
const LOCK: u8 = 4;
const UNLOCK: u8 = 5;
/// A get-accumulate: the target's old data answered, then the origin's combined into it.
pub(crate) const GACC: u8 = 6;
/// A compare-and-swap: the data is the value compared, then the new value.
const CAS: u8 = 7;

/// Bytes of a request's header: kind, lock type, 2 spare, target count, target datatype,
/// operation (each 4 bytes), displacement in bytes (8).
const HEADER: usize = 24;

/// An answer the origin waits for: its receive, and the acknowledgement's slot.
struct Pending {
    target: c_int,
    req: ffi::MPI_Request,
    ack: Option<Box<c_int>>,
}

/// The target side of a window: locks held and asked for, answers being sent.
#[derive(Default)]
struct TargetState {
    exclusive: bool,
    shared: u32,
    queue: VecDeque<(c_int, bool)>,
    sending: Vec<(ffi::MPI_Request, Vec<u8>)>,
    closed: bool,
    /// The memory attached to a dynamic window: address and length of each.
    regions: Vec<(usize, usize)>,
}

/// The memory a window owns.
pub(crate) enum Memory {
    /// The program's (`MPI_Win_create`), or none (`MPI_Win_create_dynamic`).
    None,
    /// `MPI_Win_allocate`'s (16-byte aligned).
    Heap(#[allow(dead_code)] Vec<u128>),
    /// `MPI_Win_allocate_shared`'s: the segment, and each member's part of it (its address
    /// here, its size and displacement unit).
    Shared(#[allow(dead_code)] crate::shm::Segment, Vec<(usize, MPI_Aint, c_int)>),
}

/// General active target synchronization: the exposure epoch (the origins whose completion
/// is awaited, the sends of the post notices) and the access epoch (the targets).
#[derive(Default)]
pub(crate) struct Epochs {
    pub(crate) exposed_to: Vec<c_int>,
    pub(crate) posts: Vec<ffi::MPI_Request>,
    pub(crate) accessing: Vec<c_int>,
}

/// A window.
pub struct Win {
    /// The private communicator (the library's handle; freed with the window).
    pub(crate) raw: ffi::MPI_Comm,
    /// The communicator it was made from (MPICH handle), for the error handler.
    parent: c_int,
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    pub(crate) flavor: c_int,
    model: c_int,
    /// Every member's window size and displacement unit.
    pub(crate) sizes: Vec<(MPI_Aint, c_int)>,
    pub(crate) memory: Memory,
    pending: Mutex<Vec<Pending>>,
    target: Mutex<TargetState>,
    pub(crate) epochs: Mutex<Epochs>,
}

// SAFETY: `base` is an address of the program's memory that the window's users (the
// program's threads and the server) access as the MPI standard rules: concurrent accesses
// are the program's to synchronize (epochs, locks); the rest is behind mutexes or immutable.
unsafe impl Send for Win {}
// SAFETY: as above.
unsafe impl Sync for Win {}

/// The windows.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static WINS: Slab<Arc<Win>> = Slab::new(object::WIN);

/// The windows the server polls, whether it runs, and its thread.
struct Server {
    wins: Vec<Arc<Win>>,
    running: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

// Process-wide: one server thread per process serves every window.
static SERVER: Mutex<Server> = Mutex::new(Server { wins: Vec::new(), running: false, thread: None });

/// At `MPI_Finalize`: the windows the program did not free are no longer served, and the
/// server thread is gone before the library stops.
pub(crate) fn stop_server() {
    let t = {
        let mut s = SERVER.lock();
        s.wins.clear();
        s.thread.take()
    };
    if let Some(t) = t {
        let _ = t.join();
    }
}

/// The window of handle `w`, or `MPI_ERR_WIN`.
/// Whether `w` names a window.
pub(crate) fn is_window(w: c_int) -> bool {
    WINS.with(w, |_| ()).is_some()
}

pub(crate) fn win(w: c_int) -> Result<Arc<Win>, c_int> {
    WINS.get(w).ok_or(MPI_ERR_WIN)
}

/// The communicator whose handler gets window `w`'s errors.
pub(crate) fn errc(w: c_int) -> c_int {
    WINS.with(w, |x| x.parent).unwrap_or(MPI_COMM_WORLD)
}

/// The library's byte and int datatypes.
fn bytes_dt() -> ffi::MPI_Datatype {
    predefined(MPI_BYTE).expect("MPI_BYTE")
}
fn int_dt() -> ffi::MPI_Datatype {
    predefined(MPI_INT).expect("MPI_INT")
}

/// Whether the job runs replicas (`p2pmpirun -r R`, R > 1): the server's order of service
/// is not a choice the replicas follow, so windows are refused there (by every process, the
/// launcher's setting being the same everywhere: none waits for the others).
pub(crate) fn replicated() -> bool {
    std::env::var("P2PMPI_REPLICAS").ok().and_then(|v| v.trim().parse::<u32>().ok()).is_some_and(|r| r > 1)
}

/// Makes a window of flavor `flavor` over `base` (`size` bytes) on `c`'s members
/// (collective).
pub(crate) fn create(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    c: c_int,
    memory: Memory,
    flavor: c_int,
) -> Result<c_int, c_int> {
    let fc = comm(c)?;
    if replicated() {
        return Err(MPI_ERR_UNSUPPORTED_OPERATION);
    }
    if size < 0 {
        return Err(MPI_ERR_SIZE);
    }
    if disp_unit <= 0 {
        return Err(MPI_ERR_DISP);
    }
    let rc = rust_comm(c)?;
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let mut raw = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `raw` is a local.
    ok(unsafe { ffi::MPI_Comm_dup(fc, &mut raw) })?;
    let n = rc.size() as usize;
    let mine = [size, MPI_Aint::from(disp_unit)];
    let mut all: Vec<MPI_Aint> = vec![0; 2 * n];
    // SAFETY: `mine` holds 2 and `all` 2n 8-byte elements (MPI_BYTE counts: 16 and 16n).
    ok(unsafe {
        ffi::MPI_Allgather(mine.as_ptr().cast(), 16, bytes_dt(), all.as_mut_ptr().cast(), 16, bytes_dt(), raw)
    })?;
    let w = Arc::new(Win {
        raw,
        parent: c,
        base,
        size,
        disp_unit,
        flavor,
        model: MPI_WIN_UNIFIED,
        sizes: all.chunks(2).map(|p| (p[0], p[1] as c_int)).collect(),
        memory,
        pending: Mutex::new(Vec::new()),
        target: Mutex::new(TargetState::default()),
        epochs: Mutex::new(Epochs::default()),
    });
    let h = WINS.insert(w.clone());
    let mut s = SERVER.lock();
    s.wins.push(w);
    if !s.running {
        s.running = true;
        // A thread that ended (its windows freed) is joined before the next one starts.
        if let Some(old) = s.thread.take() {
            drop(s);
            let _ = old.join();
            s = SERVER.lock();
        }
        s.thread = Some(std::thread::Builder::new().name("p2pmpi-rma".into()).spawn(serve).map_err(|_| MPI_ERR_OTHER)?);
    }
    Ok(h)
}

mpi_fn! {
    /// Makes a window of `size` bytes at `base` on `comm`'s members (collective).
    fn MPI_Win_create(base: *mut c_void, size: MPI_Aint, disp_unit: c_int, _info: c_int, c: c_int, out: *mut c_int)
        on c => {
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = create(base, size, disp_unit, c, Memory::None, MPI_WIN_FLAVOR_CREATE)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(out, h) }
    }
}

/// `MPI_Win_allocate`'s work.
fn allocate(size: MPI_Aint, disp_unit: c_int, c: c_int, baseptr: *mut c_void, out: *mut c_int) -> Result<(), c_int> {
    if out.is_null() || baseptr.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if size < 0 {
        return Err(MPI_ERR_SIZE);
    }
    let mut mem = vec![0u128; (size as usize).div_ceil(16)];
    let base = mem.as_mut_ptr() as *mut c_void;
    let h = create(base, size, disp_unit, c, Memory::Heap(mem), MPI_WIN_FLAVOR_ALLOCATE)?;
    // SAFETY: checked non-null; the caller vouches `baseptr` is a writable `void *`.
    unsafe { (baseptr as *mut *mut c_void).write(base) };
    // SAFETY: as above.
    unsafe { put(out, h) }
}

mpi_fn! {
    /// Allocates `size` bytes (16-byte aligned, zeroed) and makes a window of them
    /// (collective); their address goes to `*baseptr`.
    fn MPI_Win_allocate(size: MPI_Aint, disp_unit: c_int, _info: c_int, c: c_int, baseptr: *mut c_void, out: *mut c_int)
        on c => allocate(size, disp_unit, c, baseptr, out)
}

mpi_fn! {
    /// Frees `*win` once every operation on it completed (collective) and sets it to
    /// `MPI_WIN_NULL`.
    fn MPI_Win_free(wp: *mut c_int) on MPI_COMM_WORLD => {
        if wp.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { wp.read() };
        let w = win(h)?;
        flush(&w, None)?;
        // After the barrier no member sends a request to this window any more.
        // SAFETY: the private communicator lives until below.
        ok(unsafe { ffi::MPI_Barrier(w.raw) })?;
        SERVER.lock().wins.retain(|x| !Arc::ptr_eq(x, &w));
        {
            let mut t = w.target.lock();
            t.closed = true;
            for (mut r, _) in t.sending.drain(..) {
                // SAFETY: `r` is a live request of a send whose buffer is dropped after it.
                unsafe { ffi::MPI_Wait(&mut r, std::ptr::null_mut()) };
            }
        }
        for mut r in std::mem::take(&mut w.epochs.lock().posts) {
            // SAFETY: a live request of a send of no data (a post notice never waited for).
            unsafe { ffi::MPI_Wait(&mut r, std::ptr::null_mut()) };
        }
        let deleted = crate::attributes::delete_all(h);
        WINS.take(h);
        HANDLERS.lock().remove(&h);
        NAMES.lock().remove(&h);
        let mut raw = w.raw;
        // SAFETY: the private communicator, no longer used by anyone.
        unsafe { ffi::MPI_Comm_free(&mut raw) };
        // SAFETY: as above.
        unsafe { wp.write(MPI_WIN_NULL) };
        deleted
    }
}

/// Waits for the answers of the operations to `target` (every target if `None`).
pub(crate) fn flush(w: &Win, target: Option<c_int>) -> Result<(), c_int> {
    let mine: Vec<Pending> = {
        let mut p = w.pending.lock();
        let (mine, rest) = p.drain(..).partition(|x| target.is_none_or(|t| t == x.target));
        *p = rest;
        mine
    };
    let mut r = Ok(());
    for mut x in mine {
        // SAFETY: `x.req` is a live receive whose buffer (the origin's, or `x.ack`) is valid.
        let rc = unsafe { ffi::MPI_Wait(&mut x.req, std::ptr::null_mut()) };
        if rc != MPI_SUCCESS {
            r = Err(rc);
        } else if let Some(a) = x.ack {
            if *a != MPI_SUCCESS {
                r = Err(*a);
            }
        }
    }
    r
}

/// Sends request `msg` to `target`'s server.
fn send_request(w: &Win, target: c_int, msg: &[u8]) -> Result<(), c_int> {
    // SAFETY: `msg` holds `msg.len()` bytes.
    ok(unsafe { ffi::MPI_Send(msg.as_ptr().cast(), msg.len() as c_int, bytes_dt(), target, TAG_REQ, w.raw) })
}

/// Posts the receive of an acknowledgement from `target`.
fn expect_ack(w: &Win, target: c_int) -> Result<(), c_int> {
    let mut ack = Box::new(-1);
    let mut req = crate::handles::null_request();
    // SAFETY: the box lives in the pending list until the receive completed.
    ok(unsafe { ffi::MPI_Irecv((&mut *ack as *mut c_int).cast(), 1, int_dt(), target, TAG_REPLY, w.raw, &mut req) })?;
    w.pending.lock().push(Pending { target, req, ack: Some(ack) });
    Ok(())
}

/// Posts the receive of the data answered by `target` into `into`.
fn receive_answer(w: &Win, into: Data, target: c_int) -> Result<(), c_int> {
    let mut req = crate::handles::null_request();
    // SAFETY: the caller vouches for `into.count` elements of `into.dt` at `into.addr` until
    // the operation completes (a flush waits for this receive).
    ok(unsafe { ffi::MPI_Irecv(into.addr, into.count, datatype(into.dt)?, target, TAG_REPLY, w.raw, &mut req) })?;
    w.pending.lock().push(Pending { target, req, ack: None });
    Ok(())
}

/// A request's header.
fn header(kind: u8, lock: c_int, tcount: c_int, tdt: c_int, op: c_int, disp: i64) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER);
    m.extend_from_slice(&[kind, (lock == MPI_LOCK_EXCLUSIVE) as u8, 0, 0]);
    for v in [tcount, tdt, op] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.extend_from_slice(&disp.to_le_bytes());
    m
}

/// A buffer of an operation at the origin: `count` elements of `dt` at `addr` (written only by
/// the answer of a get).
#[derive(Clone, Copy)]
pub(crate) struct Data {
    addr: *mut c_void,
    count: c_int,
    dt: c_int,
}

/// The origin's buffer of `count` elements of `dt` at `addr`.
pub(crate) fn data(addr: *const c_void, count: c_int, dt: c_int) -> Data {
    Data { addr: addr as *mut c_void, count, dt }
}

/// Where an operation goes: `count` elements of predefined `dt` at displacement `disp` of
/// the window of `rank`.
#[derive(Clone, Copy)]
pub(crate) struct Target {
    pub(crate) rank: c_int,
    pub(crate) disp: MPI_Aint,
    pub(crate) count: c_int,
    pub(crate) dt: c_int,
}

/// Checks an operation's arguments; its target offset in bytes and its bytes, or `None` for
/// nothing to do (`MPI_PROC_NULL`, no data).
fn check(w: &Win, o: Data, t: Target) -> Result<Option<(i64, usize)>, c_int> {
    if o.count < 0 || t.count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    datatype(o.dt)?;
    if predefined(t.dt).is_none() {
        return Err(MPI_ERR_UNSUPPORTED_OPERATION);
    }
    let elem = stageable(t.dt)?;
    let obytes = o.count as usize * datatype_ref(o.dt)?.type_map().size();
    let tbytes = t.count as usize * elem;
    if obytes != tbytes {
        return Err(MPI_ERR_TRUNCATE);
    }
    if t.rank == MPI_PROC_NULL || tbytes == 0 {
        return Ok(None);
    }
    let &(tsize, tunit) = usize::try_from(t.rank).ok().and_then(|r| w.sizes.get(r)).ok_or(MPI_ERR_RANK)?;
    let off = t.disp.checked_mul(tunit as MPI_Aint).ok_or(MPI_ERR_DISP)?;
    // A dynamic window's displacements are addresses, checked by the target's server.
    if w.flavor != MPI_WIN_FLAVOR_DYNAMIC && (t.disp < 0 || off + tbytes as MPI_Aint > tsize) {
        return Err(MPI_ERR_RMA_RANGE);
    }
    Ok(Some((off, tbytes)))
}

/// A put or an accumulate: the origin's data packed after the header, an acknowledgement
/// expected.
pub(crate) fn put_or_acc(kind: u8, o: Data, t: Target, op: c_int, wh: c_int) -> Result<(), c_int> {
    let w = win(wh)?;
    if kind == ACC && op != MPI_REPLACE && op != MPI_NO_OP {
        crate::ops::system_op(op)?;
    }
    let Some((off, bytes)) = check(&w, o, t)? else { return Ok(()) };
    let mut msg = header(kind, 0, t.count, t.dt, op, off);
    msg.resize(HEADER + bytes, 0);
    // SAFETY: the caller vouches for `o.count` elements of `o.dt` at `o.addr`.
    let b = unsafe { DynBuffer::from_raw(crate::nz(o.addr, o.count), o.count, datatype_ref(o.dt)?) };
    rust_comm(MPI_COMM_SELF)?.pack_into(&b, &mut msg[HEADER..], 0);
    send_request(&w, t.rank, &msg)?;
    expect_ack(&w, t.rank)
}

/// Defines one form of a one-sided operation (`put`, `accumulate`, `get`, `get_accumulate`)
/// from its standard arguments: `$cnt` is the type of its counts (`MPI_Count` in a `_c` form,
/// `MPI_ERR_COUNT` for one beyond `int`'s range). With a last argument `request`, the
/// request-based form ([`crate::win_request::requested`]). The module that uses it imports
/// the names its bodies call.
macro_rules! rma_fn {
    ($(#[$m:meta])* put $name:ident($cnt:ty $(, $request:ident)?)) => {
        mpi_fn! {
            $(#[$m])*
            fn $name(oaddr: *const c_void, ocount: $cnt, odt: c_int, target: c_int, disp: MPI_Aint, tcount: $cnt,
                tdt: c_int, wh: c_int $(, $request: *mut c_int)?)
                on errc(wh) => rma_fn!(@run wh, target $(, $request)? => {
                let o = data(oaddr, int(ocount)?, odt);
                put_or_acc(PUT, o, Target { rank: target, disp, count: int(tcount)?, dt: tdt }, 0, wh)
            })
        }
    };
    ($(#[$m:meta])* accumulate $name:ident($cnt:ty $(, $request:ident)?)) => {
        mpi_fn! {
            $(#[$m])*
            fn $name(oaddr: *const c_void, ocount: $cnt, odt: c_int, target: c_int, disp: MPI_Aint, tcount: $cnt,
                tdt: c_int, op: c_int, wh: c_int $(, $request: *mut c_int)?)
                on errc(wh) => rma_fn!(@run wh, target $(, $request)? => {
                let o = data(oaddr, int(ocount)?, odt);
                put_or_acc(ACC, o, Target { rank: target, disp, count: int(tcount)?, dt: tdt }, op, wh)
            })
        }
    };
    ($(#[$m:meta])* get $name:ident($cnt:ty $(, $request:ident)?)) => {
        mpi_fn! {
            $(#[$m])*
            fn $name(oaddr: *mut c_void, ocount: $cnt, odt: c_int, target: c_int, disp: MPI_Aint, tcount: $cnt,
                tdt: c_int, wh: c_int $(, $request: *mut c_int)?)
                on errc(wh) => rma_fn!(@run wh, target $(, $request)? => {
                get(data(oaddr, int(ocount)?, odt), Target { rank: target, disp, count: int(tcount)?, dt: tdt }, wh)
            })
        }
    };
    ($(#[$m:meta])* get_accumulate $name:ident($cnt:ty $(, $request:ident)?)) => {
        mpi_fn! {
            $(#[$m])*
            fn $name(oaddr: *const c_void, ocount: $cnt, odt: c_int, result: *mut c_void, rcount: $cnt,
                rdt: c_int, target: c_int, disp: MPI_Aint, tcount: $cnt, tdt: c_int, op: c_int, wh: c_int
                $(, $request: *mut c_int)?)
                on errc(wh) => rma_fn!(@run wh, target $(, $request)? => {
                let (o, r) = (data(oaddr, int(ocount)?, odt), data(result, int(rcount)?, rdt));
                get_accumulate(o, r, Target { rank: target, disp, count: int(tcount)?, dt: tdt }, op, wh)
            })
        }
    };
    (@run $wh:ident, $target:ident => $op:expr) => {
        $op
    };
    (@run $wh:ident, $target:ident, $request:ident => $op:expr) => {
        // SAFETY: the caller vouches that `request` is null or writable.
        unsafe { requested($wh, $target, $request, || $op) }
    };
}
pub(crate) use rma_fn;

rma_fn! {
    /// Writes `origin_count` elements of `origin_datatype` into `target_rank`'s window at
    /// `target_disp` (complete at the next flush, fence or unlock).
    put MPI_Put(c_int)
}

rma_fn! {
    /// `MPI_Put` with large counts.
    put MPI_Put_c(MPI_Count)
}

rma_fn! {
    /// Combines the origin's data with `target_rank`'s window at `target_disp` by `op` (a
    /// predefined operation, `MPI_REPLACE` or `MPI_NO_OP`), element by element, atomically
    /// per operation.
    accumulate MPI_Accumulate(c_int)
}

rma_fn! {
    /// `MPI_Accumulate` with large counts.
    accumulate MPI_Accumulate_c(MPI_Count)
}

/// `MPI_Get`'s work.
pub(crate) fn get(o: Data, t: Target, wh: c_int) -> Result<(), c_int> {
    let w = win(wh)?;
    let Some((off, _)) = check(&w, o, t)? else { return Ok(()) };
    receive_answer(&w, o, t.rank)?;
    send_request(&w, t.rank, &header(GET, 0, t.count, t.dt, 0, off))
}

rma_fn! {
    /// Reads `target_count` elements of `target_datatype` at `target_disp` of `target_rank`'s
    /// window into the origin's buffer (there at the next flush, fence or unlock).
    get MPI_Get(c_int)
}

rma_fn! {
    /// `MPI_Get` with large counts.
    get MPI_Get_c(MPI_Count)
}

mpi_fn! {
    /// Makes a window without memory on `comm`'s members (collective): each attaches its own
    /// with `MPI_Win_attach`, and a target displacement is an address at the target
    /// (`MPI_Get_address`).
    fn MPI_Win_create_dynamic(_info: c_int, c: c_int, out: *mut c_int) on c => {
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = create(std::ptr::null_mut(), 0, 1, c, Memory::None, MPI_WIN_FLAVOR_DYNAMIC)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(out, h) }
    }
}

mpi_fn! {
    /// Lets the window's members reach `size` bytes at `base` (a dynamic window only:
    /// `MPI_ERR_RMA_FLAVOR` otherwise).
    fn MPI_Win_attach(wh: c_int, base: *mut c_void, size: MPI_Aint) on errc(wh) => {
        let w = win(wh)?;
        if w.flavor != MPI_WIN_FLAVOR_DYNAMIC {
            return Err(MPI_ERR_RMA_FLAVOR);
        }
        let len = usize::try_from(size).map_err(|_| MPI_ERR_SIZE)?;
        if base.is_null() && len > 0 {
            return Err(MPI_ERR_ARG);
        }
        w.target.lock().regions.push((base as usize, len));
        Ok(())
    }
}

mpi_fn! {
    /// Takes back the memory attached at `base` (`MPI_ERR_RMA_ATTACH` if none is).
    fn MPI_Win_detach(wh: c_int, base: *const c_void) on errc(wh) => {
        let w = win(wh)?;
        if w.flavor != MPI_WIN_FLAVOR_DYNAMIC {
            return Err(MPI_ERR_RMA_FLAVOR);
        }
        let mut t = w.target.lock();
        let i = t.regions.iter().position(|&(a, _)| a == base as usize).ok_or(MPI_ERR_RMA_ATTACH)?;
        t.regions.remove(i);
        Ok(())
    }
}

mpi_fn! {
    /// Completes every operation on the window and separates epochs (collective).
    fn MPI_Win_fence(_assert: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        flush(&w, None)?;
        // SAFETY: the private communicator lives while the window does.
        ok(unsafe { ffi::MPI_Barrier(w.raw) })
    }
}

mpi_fn! {
    /// Completes the operations to `rank` (applied there).
    fn MPI_Win_flush(rank: c_int, wh: c_int) on errc(wh) => flush(&*win(wh)?, Some(rank))
}

mpi_fn! {
    /// Completes every operation on the window.
    fn MPI_Win_flush_all(wh: c_int) on errc(wh) => flush(&*win(wh)?, None)
}

mpi_fn! {
    /// As `MPI_Win_flush` (an operation is complete at the origin only once applied).
    fn MPI_Win_flush_local(rank: c_int, wh: c_int) on errc(wh) => flush(&*win(wh)?, Some(rank))
}

mpi_fn! {
    /// As `MPI_Win_flush_all`.
    fn MPI_Win_flush_local_all(wh: c_int) on errc(wh) => flush(&*win(wh)?, None)
}

mpi_fn! {
    /// Synchronizes the window's memory views (one view here: a memory fence).
    fn MPI_Win_sync(wh: c_int) on errc(wh) => {
        win(wh)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Asks `targets`' servers for the lock and waits for every grant.
fn lock(w: &Win, targets: &[c_int], exclusive: bool) -> Result<(), c_int> {
    let ty = if exclusive { MPI_LOCK_EXCLUSIVE } else { MPI_LOCK_SHARED };
    for &t in targets {
        flush(w, Some(t))?;
        expect_ack(w, t)?;
        send_request(w, t, &header(LOCK, ty, 0, 0, 0, 0))?;
    }
    flush(w, None)
}

/// Releases the lock of `targets` once the operations to them completed.
fn unlock(w: &Win, targets: &[c_int]) -> Result<(), c_int> {
    for &t in targets {
        flush(w, Some(t))?;
        send_request(w, t, &header(UNLOCK, 0, 0, 0, 0, 0))?;
    }
    Ok(())
}

/// A target rank of `w`, or `MPI_ERR_RANK`.
fn target_rank(w: &Win, rank: c_int) -> Result<c_int, c_int> {
    if rank >= 0 && (rank as usize) < w.sizes.len() {
        Ok(rank)
    } else {
        Err(MPI_ERR_RANK)
    }
}

mpi_fn! {
    /// Starts a passive-target epoch at `rank`: waits for its lock (`MPI_LOCK_SHARED` or
    /// `MPI_LOCK_EXCLUSIVE`).
    fn MPI_Win_lock(lock_type: c_int, rank: c_int, _assert: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        if lock_type != MPI_LOCK_SHARED && lock_type != MPI_LOCK_EXCLUSIVE {
            return Err(MPI_ERR_LOCKTYPE);
        }
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        lock(&w, &[target_rank(&w, rank)?], lock_type == MPI_LOCK_EXCLUSIVE)
    }
}

mpi_fn! {
    /// Ends the passive-target epoch at `rank`: its operations complete, then the lock is
    /// released.
    fn MPI_Win_unlock(rank: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        unlock(&w, &[target_rank(&w, rank)?])
    }
}

mpi_fn! {
    /// A shared lock at every member.
    fn MPI_Win_lock_all(_assert: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let all: Vec<c_int> = (0..w.sizes.len() as c_int).collect();
        lock(&w, &all, false)
    }
}

mpi_fn! {
    /// Releases the locks of `MPI_Win_lock_all` once every operation completed.
    fn MPI_Win_unlock_all(wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let all: Vec<c_int> = (0..w.sizes.len() as c_int).collect();
        unlock(&w, &all)
    }
}

mpi_fn! {
    /// The group of the window's members.
    fn MPI_Win_get_group(wh: c_int, out: *mut c_int) on errc(wh) => {
        let w = win(wh)?;
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the predefined names are initialized statics that nothing writes.
        let mut g = unsafe { ffi::RSMPI_GROUP_NULL };
        // SAFETY: `g` is a local; the private communicator lives while the window does.
        ok(unsafe { ffi::MPI_Comm_group(w.raw, &mut g) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(out, new_group(g)) }
    }
}

mpi_fn! {
    /// A predefined attribute of the window: `MPI_WIN_BASE` (the address), `MPI_WIN_SIZE`
    /// (the address of an `MPI_Aint`), `MPI_WIN_DISP_UNIT`, `MPI_WIN_CREATE_FLAVOR`,
    /// `MPI_WIN_MODEL` (the address of an `int`); for another key, the program's attribute
    /// ([`crate::attributes`]).
    fn MPI_Win_get_attr(wh: c_int, key: c_int, val: *mut c_void, flag: *mut c_int) on errc(wh) => {
        let w = win(wh)?;
        if val.is_null() || flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let p: *const c_void = match key {
            MPI_WIN_BASE => w.base,
            MPI_WIN_SIZE => (&w.size as *const MPI_Aint).cast(),
            MPI_WIN_DISP_UNIT => (&w.disp_unit as *const c_int).cast(),
            MPI_WIN_CREATE_FLAVOR => (&w.flavor as *const c_int).cast(),
            MPI_WIN_MODEL => (&w.model as *const c_int).cast(),
            // SAFETY: the caller's contract.
            _ => return unsafe { crate::attributes::get(wh, key, val, flag, crate::attributes::On::Win) },
        };
        // SAFETY: checked non-null; the caller vouches `val` is a writable `void *`. The
        // fields live while the window does (it is behind an `Arc` the table holds).
        unsafe {
            (val as *mut *const c_void).write(p);
            put(flag, 1)
        }
    }
}

// ------------------------------------------------------------------------------- the server

/// The server thread: polls every window until none is left.
fn serve() {
    let mut idle: u32 = 0;
    loop {
        let wins = {
            let mut s = SERVER.lock();
            if s.wins.is_empty() {
                s.running = false;
                return;
            }
            s.wins.clone()
        };
        let busy = wins.iter().fold(false, |b, w| serve_window(w) | b);
        idle = if busy { 0 } else { idle.saturating_add(1) };
        if idle > 64 {
            std::thread::sleep(Duration::from_micros(u64::from(idle.min(1064) - 64)));
        } else if idle > 0 {
            std::thread::yield_now();
        }
    }
}

/// Serves the requests that arrived at `w`; whether there was any.
fn serve_window(w: &Win) -> bool {
    let mut t = w.target.lock();
    if t.closed {
        return false;
    }
    t.sending.retain_mut(|(r, _)| {
        let mut done = 0;
        // SAFETY: `r` is a live send request whose buffer is the vector next to it.
        unsafe { ffi::MPI_Test(r, &mut done, std::ptr::null_mut()) };
        done == 0
    });
    let mut any = false;
    loop {
        let (mut flag, mut st) = (0, ffi::MPI_Status::default());
        // SAFETY: locals; the private communicator lives while the window is served.
        if unsafe { ffi::MPI_Iprobe(-2, TAG_REQ, w.raw, &mut flag, &mut st) } != MPI_SUCCESS || flag == 0 {
            return any;
        }
        any = true;
        let mut n = 0;
        // SAFETY: `st` was just filled.
        unsafe { ffi::MPI_Get_count(&st, bytes_dt(), &mut n) };
        let mut msg = vec![0u8; n.max(0) as usize];
        // SAFETY: `msg` holds `n` bytes (a dangling aligned address if none).
        let rc = unsafe {
            ffi::MPI_Recv(
                crate::nz_mut(msg.as_mut_ptr().cast(), n),
                n,
                bytes_dt(),
                st.MPI_SOURCE,
                TAG_REQ,
                w.raw,
                &mut st,
            )
        };
        if rc == MPI_SUCCESS && msg.len() >= HEADER {
            handle(w, &mut t, st.MPI_SOURCE, &msg);
        }
    }
}

/// Sends an answer to `to` (its buffer kept until the send completed).
fn answer(w: &Win, t: &mut TargetState, to: c_int, data: Vec<u8>) {
    let mut r = crate::handles::null_request();
    // SAFETY: `data` is kept with the request until it completed.
    let rc = unsafe {
        ffi::MPI_Isend(
            crate::nz(data.as_ptr().cast(), data.len() as c_int),
            data.len() as c_int,
            bytes_dt(),
            to,
            TAG_REPLY,
            w.raw,
            &mut r,
        )
    };
    if rc == MPI_SUCCESS {
        t.sending.push((r, data));
    }
}

/// Grants the queued locks that may be granted now, in order.
fn grant(w: &Win, t: &mut TargetState) {
    while let Some(&(who, exclusive)) = t.queue.front() {
        if t.exclusive || (exclusive && t.shared > 0) {
            return;
        }
        t.queue.pop_front();
        if exclusive {
            t.exclusive = true;
        } else {
            t.shared += 1;
        }
        answer(w, t, who, MPI_SUCCESS.to_le_bytes().to_vec());
    }
}

/// Applies one request from `src`.
fn handle(w: &Win, t: &mut TargetState, src: c_int, msg: &[u8]) {
    let word = |i: usize| c_int::from_le_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
    let (kind, exclusive) = (msg[0], msg[1] == 1);
    let (tcount, tdt, op) = (word(4), word(8), word(12));
    let off = i64::from_le_bytes(msg[16..24].try_into().expect("8 bytes"));
    let data = &msg[HEADER..];
    match kind {
        LOCK => {
            t.queue.push_back((src, exclusive));
            grant(w, t);
        }
        UNLOCK => {
            if t.exclusive {
                t.exclusive = false;
            } else {
                t.shared = t.shared.saturating_sub(1);
            }
            grant(w, t);
        }
        PUT | ACC | GET => {
            let bytes = stageable(tdt).map(|e| e * tcount.max(0) as usize).unwrap_or(usize::MAX);
            let at = target_ptr(w, t, off, bytes);
            if kind == GET {
                let out = match at {
                    // SAFETY: `bytes` bytes at `p` are inside the window's memory.
                    Some(p) => unsafe { std::slice::from_raw_parts(p, bytes) }.to_vec(),
                    None => vec![0; bytes.min(1 << 20)],
                };
                return answer(w, t, src, out);
            }
            let rc = match at {
                Some(p) if data.len() == bytes => {
                    // SAFETY: `bytes` bytes at `p` are inside the window's memory.
                    unsafe { apply(p, data, tcount, tdt, if kind == PUT { MPI_REPLACE } else { op }) }
                }
                _ => MPI_ERR_RMA_RANGE,
            };
            answer(w, t, src, rc.to_le_bytes().to_vec());
        }
        GACC | CAS => {
            let bytes = stageable(tdt).map(|e| e * tcount.max(0) as usize).unwrap_or(usize::MAX);
            let at = target_ptr(w, t, off, bytes);
            let given = if kind == CAS {
                2 * bytes
            } else if op == MPI_NO_OP {
                0
            } else {
                bytes
            };
            let Some(dst) = at.filter(|_| data.len() == given) else {
                // The origin waits for `bytes` bytes: zeros (its flush reports nothing more).
                return answer(w, t, src, vec![0; bytes.min(1 << 20)]);
            };
            // SAFETY: `bytes` bytes at `dst` are inside the window's memory; the server is the
            // only writer while it serves this request, so read and update are atomic.
            let old = unsafe { std::slice::from_raw_parts(dst, bytes) }.to_vec();
            if kind == CAS {
                if data[..bytes] == old[..] {
                    // SAFETY: as above.
                    unsafe { std::ptr::copy_nonoverlapping(data[bytes..].as_ptr(), dst, bytes) };
                }
            } else {
                // SAFETY: as above.
                unsafe { apply(dst, data, tcount, tdt, op) };
            }
            answer(w, t, src, old);
        }
        _ => {}
    }
}

/// The address of `bytes` bytes at offset `off` of `w`'s memory (for a dynamic window, at
/// address `off` in memory attached to it), or `None` if they are not all inside.
fn target_ptr(w: &Win, t: &TargetState, off: i64, bytes: usize) -> Option<*mut u8> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(bytes)?;
    if w.flavor == MPI_WIN_FLAVOR_DYNAMIC {
        let inside = t.regions.iter().any(|&(a, l)| start >= a && end <= a + l);
        inside.then_some(start as *mut u8)
    } else {
        (end as MPI_Aint <= w.size).then(|| w.base.cast::<u8>().wrapping_add(start))
    }
}

/// Combines `data` (`count` elements of predefined `dt`) into `dst` by `op`.
///
/// # Safety
/// `dst` must be valid for `data.len()` bytes, apart from `data`.
unsafe fn apply(dst: *mut u8, data: &[u8], count: c_int, dt: c_int, op: c_int) -> c_int {
    match op {
        MPI_NO_OP => MPI_SUCCESS,
        MPI_REPLACE => {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
            MPI_SUCCESS
        }
        _ => {
            let (Ok(o), Ok(d)) = (crate::ops::system_op(op), datatype_ref(dt)) else { return MPI_ERR_OP };
            // SAFETY: the caller's contract: `count` elements of `dt` (no holes) at both.
            let (a, mut b) =
                unsafe { (DynBuffer::from_raw(data.as_ptr(), count, d), DynBufferMut::from_raw(dst, count, d)) };
            p2pmpi::collective::reduce_local_into(&a, &mut b, o);
            MPI_SUCCESS
        }
    }
}

/// A large count or displacement unit as an `int` (`MPI_ERR_COUNT` if it does not fit).
pub(crate) fn int<T: TryInto<c_int>>(n: T) -> Result<c_int, c_int> {
    n.try_into().map_err(|_| MPI_ERR_COUNT)
}

mpi_fn! {
    /// `MPI_Win_create` with a large displacement unit.
    fn MPI_Win_create_c(base: *mut c_void, size: MPI_Aint, disp_unit: MPI_Aint, info: c_int, c: c_int, out: *mut c_int)
        on c => {
        let _ = info;
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = create(base, size, int(disp_unit)?, c, Memory::None, MPI_WIN_FLAVOR_CREATE)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(out, h) }
    }
}

mpi_fn! {
    /// `MPI_Win_allocate` with a large displacement unit.
    fn MPI_Win_allocate_c(size: MPI_Aint, disp_unit: MPI_Aint, info: c_int, c: c_int, baseptr: *mut c_void, out: *mut c_int)
        on c => {
        let _ = info;
        allocate(size, int(disp_unit)?, c, baseptr, out)
    }
}

/// The error handler set on each window (`MPI_ERRORS_ARE_FATAL` if none).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static HANDLERS: Mutex<std::collections::BTreeMap<c_int, c_int>> = Mutex::new(std::collections::BTreeMap::new());

mpi_fn! {
    /// Sets the error handler of `win`: a predefined one (`MPI_ERRORS_ARE_FATAL`,
    /// `MPI_ERRORS_RETURN`, `MPI_ERRORS_ABORT`).
    fn MPI_Win_set_errhandler(wh: c_int, errhandler: c_int) on errc(wh) => {
        win(wh)?;
        if !crate::errors::is_handler(errhandler) {
            return Err(MPI_ERR_ARG);
        }
        HANDLERS.lock().insert(wh, errhandler);
        Ok(())
    }
}

mpi_fn! {
    /// The error handler of `win`.
    fn MPI_Win_get_errhandler(wh: c_int, errhandler: *mut c_int) on errc(wh) => {
        win(wh)?;
        if errhandler.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = HANDLERS.lock().get(&wh).copied().unwrap_or(MPI_ERRORS_ARE_FATAL);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(errhandler, h) }
    }
}

/// The names set on windows (none: the empty name).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static NAMES: Mutex<std::collections::BTreeMap<c_int, String>> = Mutex::new(std::collections::BTreeMap::new());

mpi_fn! {
    /// Names `win` (cut to `MPI_MAX_OBJECT_NAME - 1` bytes).
    fn MPI_Win_set_name(wh: c_int, name: *const std::os::raw::c_char) on errc(wh) => {
        win(wh)?;
        if name.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches for a NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        let mut end = s.len().min(MPI_MAX_OBJECT_NAME as usize - 1);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        NAMES.lock().insert(wh, s[..end].to_string());
        Ok(())
    }
}

mpi_fn! {
    /// The name of `win` (empty if none was set).
    fn MPI_Win_get_name(wh: c_int, name: *mut std::os::raw::c_char, resultlen: *mut c_int) on errc(wh) => {
        win(wh)?;
        let n = NAMES.lock().get(&wh).cloned().unwrap_or_default();
        // SAFETY: the caller vouches for `MPI_MAX_OBJECT_NAME` bytes at `name`.
        unsafe { crate::put_string(&n, name, MPI_MAX_OBJECT_NAME, resultlen) }
    }
}

mpi_fn! {
    /// Hints for `win`: accepted, none used (`MPI_INFO_NULL` is refused, as MPICH does).
    fn MPI_Win_set_info(wh: c_int, info: c_int) on errc(wh) => {
        win(wh)?;
        if info == crate::info::MPI_INFO_NULL {
            return Err(MPI_ERR_ARG);
        }
        Ok(())
    }
}

mpi_fn! {
    /// The hints `win` uses: a new, empty info object.
    fn MPI_Win_get_info(wh: c_int, info: *mut c_int) on errc(wh) => {
        win(wh)?;
        if info.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        ok(unsafe { crate::info::MPI_Info_create(info) })
    }
}

/// A get-accumulate or a compare-and-swap: `data` (packed) after the header, the target's
/// old data received into `result`.
pub(crate) fn fetching(kind: u8, data: &[u8], result: Data, t: Target, op: c_int, wh: c_int) -> Result<(), c_int> {
    let w = win(wh)?;
    if op != MPI_REPLACE && op != MPI_NO_OP {
        crate::ops::system_op(op)?;
    }
    let Some((off, _)) = check(&w, result, t)? else { return Ok(()) };
    receive_answer(&w, result, t.rank)?;
    let mut msg = header(kind, 0, t.count, t.dt, op, off);
    msg.extend_from_slice(data);
    send_request(&w, t.rank, &msg)
}

/// `count` elements of `dt` at `addr`, packed (none for `MPI_NO_OP`'s origin).
pub(crate) fn packed(addr: *const c_void, count: c_int, dt: c_int) -> Result<Vec<u8>, c_int> {
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    let d = datatype_ref(dt)?;
    let mut out = vec![0u8; count as usize * stageable(dt)?];
    // SAFETY: the caller vouches for `count` elements of `dt` at `addr`.
    let b = unsafe { DynBuffer::from_raw(crate::nz(addr, count), count, d) };
    rust_comm(MPI_COMM_SELF)?.pack_into(&b, &mut out, 0);
    Ok(out)
}

/// `MPI_Get_accumulate`'s work.
pub(crate) fn get_accumulate(o: Data, result: Data, t: Target, op: c_int, wh: c_int) -> Result<(), c_int> {
    let data = if op == MPI_NO_OP { Vec::new() } else { packed(o.addr, o.count, o.dt)? };
    fetching(GACC, &data, result, t, op, wh)
}

rma_fn! {
    /// Reads `target_count` elements at `target_disp` of `target_rank`'s window into
    /// `result_addr` and combines the origin's data into them by `op` (`MPI_NO_OP`: only
    /// reads), atomically.
    get_accumulate MPI_Get_accumulate(c_int)
}

rma_fn! {
    /// `MPI_Get_accumulate` with large counts.
    get_accumulate MPI_Get_accumulate_c(MPI_Count)
}

mpi_fn! {
    /// `MPI_Get_accumulate` of one element of `datatype`.
    fn MPI_Fetch_and_op(
        oaddr: *const c_void,
        result: *mut c_void,
        dt: c_int,
        target: c_int,
        disp: MPI_Aint,
        op: c_int,
        wh: c_int,
    ) on errc(wh) => {
        let data = if op == MPI_NO_OP { Vec::new() } else { packed(oaddr, 1, dt)? };
        let t = Target { rank: target, disp, count: 1, dt };
        fetching(GACC, &data, crate::rma::data(result, 1, dt), t, op, wh)
    }
}

mpi_fn! {
    /// Replaces one element of `datatype` at `target_disp` of `target_rank`'s window by
    /// `*origin_addr` if it equals `*compare_addr`, atomically; the old value goes to
    /// `*result_addr`.
    fn MPI_Compare_and_swap(
        oaddr: *const c_void,
        compare: *const c_void,
        result: *mut c_void,
        dt: c_int,
        target: c_int,
        disp: MPI_Aint,
        wh: c_int,
    ) on errc(wh) => {
        let mut data = packed(compare, 1, dt)?;
        data.extend(packed(oaddr, 1, dt)?);
        let t = Target { rank: target, disp, count: 1, dt };
        fetching(CAS, &data, crate::rma::data(result, 1, dt), t, MPI_REPLACE, wh)
    }
}

mpi_fn! {
    /// Sets an attribute of `win`.
    fn MPI_Win_set_attr(wh: c_int, key: c_int, value: *mut c_void) on errc(wh) => {
        win(wh)?;
        crate::attributes::set(wh, key, value, crate::attributes::On::Win)
    }
}

mpi_fn! {
    /// Deletes an attribute of `win` by its delete callback.
    fn MPI_Win_delete_attr(wh: c_int, key: c_int) on errc(wh) => {
        win(wh)?;
        crate::attributes::delete_one(wh, key, crate::attributes::On::Win)
    }
}
