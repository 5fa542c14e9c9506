//! Requests of immediate (non-blocking) operations, scopes that guarantee their buffers
//! outlive them, guards, and collections of requests.

use crate::context::{wait_req, wait_until, with_engine};
use crate::datatype::{Datatype, TypeMap};
use crate::device::{ReqId, StatusInfo};
use crate::error::{Error, OrFatal, Result};
use crate::handles::MPI_Request;
use crate::topology::{comm_rank_of, Rank};
use crate::{Count, Tag};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

/// What a completed receive or probe reports.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Status {
    pub(crate) source: Rank,
    pub(crate) tag: Tag,
    pub(crate) bytes: u64,
    pub(crate) cancelled: bool,
}

impl Status {
    /// The rank of the message's sender.
    pub fn source_rank(&self) -> Rank {
        self.source
    }
    /// The message's tag.
    pub fn tag(&self) -> Tag {
        self.tag
    }
    /// How many elements of datatype `d` the message holds.
    pub fn count<D: Datatype>(&self, d: D) -> Count {
        self.bytes.checked_div(d.type_map().size() as u64).map_or(0, |n| n as Count)
    }
    /// The status a raw `MPI_Status` describes (e.g. from `mpi::ffi::MPI_Recv`).
    pub fn from_raw(status: crate::handles::MPI_Status) -> Status {
        Status { source: status.MPI_SOURCE, tag: status.MPI_TAG, bytes: status.bytes, cancelled: status.cancelled != 0 }
    }
    /// The message size in bytes (not in rsmpi).
    pub fn byte_count(&self) -> u64 {
        self.bytes
    }
    /// Whether the request was cancelled (not in rsmpi).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status {{ source_rank: {}, tag: {} }}", self.source, self.tag)
    }
}

/// Data to unpack once a receive of a non-contiguous datatype completes.
pub(crate) struct Unpack {
    pub tmp: Vec<u8>,
    pub dst: *mut u8,
    pub map: TypeMap,
    pub count: usize,
}

/// The engine side of a request: what is needed to complete it.
pub(crate) struct Pending {
    pub id: ReqId,
    /// World rank of the peer waited for, if known.
    pub hint: Option<Rank>,
    /// Communicator members, to translate the source back.
    pub members: Option<Arc<[Rank]>>,
    /// Packed send data that must live until completion.
    pub keep: Option<Vec<u8>>,
    pub unpack: Option<Unpack>,
    /// A receive from `ANY_SOURCE` of a program that handles failures: the context of its
    /// communicator. It fails while a member of the communicator is failed and not
    /// acknowledged (ULFM's semantics, [`crate::ulfm`]), rather than wait for a message that
    /// may only have come from the dead.
    pub any_source_ctx: Option<u32>,
}

// SAFETY: the raw pointers (a receive's `Unpack::dst`; the device's copies of the target and
// send pointers) refer to buffers that the request's owner keeps borrowed until completion (a
// blocking call waits before returning, a `Request` holds the borrow, a `ReceiveFuture` owns
// the allocation), not to anything of the thread that made them; the device uses them only
// under the engine's lock, whichever thread drives it.
unsafe impl Send for Pending {}

impl Pending {
    pub fn new(id: ReqId, hint: Option<Rank>, members: Option<Arc<[Rank]>>) -> Pending {
        Pending { id, hint, members, keep: None, unpack: None, any_source_ctx: None }
    }

    /// A receive from `ANY_SOURCE` of a fault-aware program, not matched yet, while a member
    /// of its communicator failed unacknowledged: withdrawn and failed with that member's loss
    /// (as [`Pending::wait`] does, [`crate::ulfm::wait_any_source`]) so that waiting for
    /// several requests does not wait forever for it. Returns whether it failed it.
    fn fail_if_any_source_orphaned(&self, e: &mut crate::device::Engine) -> bool {
        let Some(ctx) = self.any_source_ctx else { return false };
        if e.follows() {
            // A replica that follows its master: the master's outcome comes.
            return false;
        }
        let Some(w) = crate::context::unacked_failure(ctx, self.members.as_deref()) else { return false };
        e.fail_receive(
            self.id,
            Error::PeerLost {
                rank: w,
                cause: "failed, and not acknowledged on this communicator (a receive from any source cannot tell whether its message would have come from it; acknowledge with failure_ack and receive again)".into(),
            },
        )
    }

    /// Turns the engine's outcome into a status, unpacking received data.
    pub fn finish(self, r: Result<StatusInfo>) -> Result<Status> {
        let st = r?;
        if let Some(u) = self.unpack {
            // SAFETY: `dst` is where the receive was asked to put `count` elements of `map`
            // (`raw_target`): the writable buffer of the request's owner, still borrowed (see
            // `Send for Pending`), or a `MaybeUninit` slot, which may be written whatever it
            // holds. The bytes are valid there (`BufferMut`'s or `Equivalence`'s contract;
            // `unpack` writes `bool` data as 0 or 1). The device put at most `tmp.len()`
            // bytes in `tmp` (a longer message fails as truncated), so the slice is in range.
            unsafe { u.map.unpack(&u.tmp[..st.len as usize], u.dst, u.count) };
        }
        Ok(Status {
            source: if st.source < 0 { st.source } else { comm_rank_of(&self.members, st.source) },
            tag: st.tag,
            bytes: st.len,
            cancelled: st.cancelled,
        })
    }

    pub fn wait(self) -> Result<Status> {
        if self.id == crate::device::DONE {
            // Finished on the spot: nothing to wait for (nor to lock the engine for).
            return self.finish(Ok(crate::device::DONE_STATUS));
        }
        let r = match self.any_source_ctx {
            Some(ctx) => crate::context::wait_any_source(self.id, ctx, self.members.as_deref()),
            None => wait_req(self.id, self.hint),
        };
        if r.is_err() {
            // The caller may free its buffer now: nothing may point into it any more.
            with_engine(|e| e.detach(self.id));
        }
        self.finish(r)
    }

    /// The outcome if finished, else the pending request back. In a replicated job this is a
    /// choice point: the master's answer is every replica's.
    #[allow(
        clippy::result_large_err,
        reason = "the Err is the request handed back unfinished; boxing it would allocate on every poll"
    )]
    pub fn test(self) -> std::result::Result<Result<Status>, Pending> {
        match self.poll() {
            Polled::NotYet => Err(self),
            Polled::Failed(e) => Ok(Err(e)),
            Polled::Done(r) => Ok(self.finish(r)),
        }
    }

    /// Whether the request finished (a choice point in a replicated job, see [`Self::test`]),
    /// leaving it in place: its outcome is then to be finished by [`Self::finish`].
    fn poll(&self) -> Polled {
        let c = with_engine(|e| {
            let c = e.completion_point();
            if c.is_some() {
                e.progress(self.hint, None);
            }
            c
        });
        if c.is_some() {
            let id = self.id;
            return match wait_until(self.hint, |e| e.completed_at(c, &[Some(id)], false).map(Ok)) {
                Err(e) => Polled::Failed(e),
                Ok(done) if done.is_empty() => Polled::NotYet,
                Ok(_) => {
                    let r = wait_req(self.id, self.hint);
                    if r.is_err() {
                        // As in `wait`: the caller may free its buffer now.
                        with_engine(|e| e.detach(self.id));
                    }
                    Polled::Done(r)
                }
            };
        }
        let r = with_engine(|e| {
            let r = e.take_done(self.id);
            if r.is_none() {
                e.progress(self.hint, None);
                // A failure or revocation told since fails the request now (a program
                // polling with `test` learns of it).
                crate::context::apply_notices(e);
                return e.take_done(self.id);
            }
            r
        });
        match r {
            Some(r) => {
                if r.is_err() {
                    with_engine(|e| e.detach(self.id));
                }
                Polled::Done(r)
            }
            None => match crate::context::fatal_error() {
                Some(e) => Polled::Failed(e),
                None => Polled::NotYet,
            },
        }
    }

    pub(crate) fn cancel(&self) {
        with_engine(|e| e.cancel(self.id));
    }

    /// Makes sure the engine no longer references this request's buffers (used when a
    /// request is dropped unfinished, before panicking).
    pub(crate) fn abandon(self) {
        with_engine(|e| e.cancel(self.id));
        let _ = self.wait();
    }
}

/// What [`Pending::poll`] found.
enum Polled {
    /// Not finished.
    NotYet,
    /// The library failed (a fatal error, a failure while waiting for a replicated job's
    /// answer): the request is abandoned with this error.
    Failed(Error),
    /// Finished with this outcome, to be finished by [`Pending::finish`].
    Done(Result<StatusInfo>),
}

/// A scope in which requests may live: it outlives the buffers they use.
///
/// # Safety
/// `register`/`unregister` must account for every request of the scope.
pub unsafe trait Scope<'a> {
    /// A request joined the scope.
    fn register(&self);
    /// A request left the scope (completed).
    ///
    /// # Safety
    /// Must match a previous `register`.
    unsafe fn unregister(&self);
}

/// The scope of requests whose buffers live forever.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StaticScope;

// SAFETY: a request in the static scope borrows its buffer for `'static`: the buffer outlives
// it whatever happens, so there is nothing to count.
unsafe impl Scope<'static> for StaticScope {
    fn register(&self) {}
    unsafe fn unregister(&self) {}
}

/// A scope created by [`scope`]: every request started in it must complete before it ends.
#[derive(Debug)]
pub struct LocalScope<'a> {
    num_requests: Cell<usize>,
    phantom: PhantomData<Cell<&'a ()>>,
}

// SAFETY: `register` and `unregister` count the scope's live requests exactly, and the scope's
// `Drop` (at the end of `scope`, before the buffers borrowed for `'a` can go) aborts the
// process if any is left: no request outlives the buffers it uses.
unsafe impl<'a> Scope<'a> for &LocalScope<'a> {
    fn register(&self) {
        self.num_requests.set(self.num_requests.get() + 1)
    }
    unsafe fn unregister(&self) {
        self.num_requests.set(self.num_requests.get().checked_sub(1).expect("unregister underflow"))
    }
}

impl Drop for LocalScope<'_> {
    fn drop(&mut self) {
        if self.num_requests.get() != 0 {
            eprintln!(
                "p2pmpi: rank {}: at least one request was dropped without being completed",
                crate::lifecycle::own_rank()
            );
            std::process::abort();
        }
    }
}

/// Runs `f` with a scope for immediate operations on local buffers.
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&LocalScope<'a>) -> R,
{
    f(&LocalScope { num_requests: Default::default(), phantom: Default::default() })
}

/// The buffer of a completed request, as a shared reference at last.
///
/// # Safety
/// `data` must be a request's buffer pointer (borrowed for `'a`, see [`Request`]'s field),
/// and that request must have completed: the device neither writes nor reads it any more.
unsafe fn completed_data<'a, D: ?Sized>(data: NonNull<D>) -> &'a D {
    // SAFETY: per the caller's contract the buffer is borrowed for `'a` and nothing writes
    // it any more; from now on it is only read, through this shared reference.
    unsafe { data.as_ref() }
}

/// A request of an immediate operation on data `D` in scope `S`. It must be completed
/// (`wait`, `test` until it succeeds) before it is dropped.
#[must_use]
pub struct Request<'a, D: ?Sized, S: Scope<'a> = StaticScope> {
    pending: Option<Pending>,
    /// The buffer, borrowed for `'a` (shared for a send, exclusive for a receive). Held as a
    /// pointer, not a reference: the device writes a receive's buffer until the request
    /// completes, and only then is a `&'a D` made ([`Self::completed_data`]).
    data: NonNull<D>,
    scope: S,
    phantom: PhantomData<(Cell<&'a ()>, &'a D)>,
}

// SAFETY: what a `Request` holds is a `Pending` (`Send`), the scope, and in effect a `&'a D`
// (`Send` when `D: Sync`): the raw pointer stands for that borrow and is only dereferenced as
// such, on whichever thread completes the request.
unsafe impl<'a, D: ?Sized + Sync, S: Scope<'a> + Send> Send for Request<'a, D, S> {}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    /// A request that reads `data` (a send).
    pub(crate) fn new(pending: Pending, data: &'a D, scope: S) -> Self {
        Self::from_parts(pending, NonNull::from(data), scope)
    }

    /// A request that writes `data` (a receive), posted by `start` on the buffer.
    pub(crate) fn receive(data: &'a mut D, scope: S, start: impl FnOnce(&mut D) -> Pending) -> Self {
        let mut ptr = NonNull::from(data);
        // SAFETY: `ptr` comes from the exclusive borrow `data`, given up to this request for
        // `'a`. This reborrow is its only use until the request completes: `start` posts the
        // receive with it, and the device keeps the raw target pointers derived from it.
        let pending = start(unsafe { ptr.as_mut() });
        Self::from_parts(pending, ptr, scope)
    }

    /// [`Self::receive`] whose start may fail: its error is returned, and nothing is left
    /// posted on the buffer (the borrow ends with the call).
    pub(crate) fn try_receive(
        data: &'a mut D,
        scope: S,
        start: impl FnOnce(&mut D) -> Result<Pending>,
    ) -> Result<Self> {
        let mut ptr = NonNull::from(data);
        // SAFETY: as in `receive`; when `start` fails it posted nothing that refers to it.
        let pending = start(unsafe { ptr.as_mut() })?;
        Ok(Self::from_parts(pending, ptr, scope))
    }

    fn from_parts(pending: Pending, data: NonNull<D>, scope: S) -> Self {
        scope.register();
        Request { pending: Some(pending), data, scope, phantom: PhantomData }
    }

    fn take(mut self) -> (Pending, NonNull<D>) {
        let p = self.pending.take().expect("live request");
        // SAFETY: this request registered with the scope in `from_parts` and leaves it once:
        // `pending` is now empty, so `Drop` will not unregister it again.
        unsafe { self.scope.unregister() };
        (p, self.data)
    }

    /// Waits for completion; returns the data buffer.
    pub fn wait_for_data(self) -> &'a D {
        let (p, d) = self.take();
        p.wait().or_fatal();
        // SAFETY: `d` is this request's buffer, and `wait` returned: the request completed.
        unsafe { completed_data(d) }
    }

    /// Waits for completion.
    pub fn wait(self) -> Status {
        self.take().0.wait().or_fatal()
    }

    /// Waits for completion, returning a communication failure instead of stopping.
    pub fn try_wait(self) -> Result<Status> {
        self.take().0.wait()
    }

    /// Waits for completion, discarding the status.
    pub fn wait_without_status(self) {
        self.wait();
    }

    /// Completes the request if it has finished, else gives it back.
    #[allow(clippy::result_large_err, reason = "rsmpi's signature: the Err is the request handed back unfinished")]
    pub fn test(self) -> std::result::Result<Status, Self> {
        self.test_with_data().map(|(s, _)| s)
    }

    /// Completes the request if it has finished, returning a communication failure instead
    /// of stopping (beyond rsmpi, like [`Self::try_wait`]); else gives it back.
    #[allow(clippy::result_large_err, reason = "as `test`: the Err is the request handed back unfinished")]
    pub fn try_test(mut self) -> std::result::Result<Result<Status>, Self> {
        let p = self.pending.take().expect("live request");
        match p.test() {
            Ok(r) => {
                // SAFETY: registered in `from_parts`, left once (`self` is forgotten below, so
                // `Drop` does not run).
                unsafe { self.scope.unregister() };
                std::mem::forget(self);
                Ok(r)
            }
            Err(p) => {
                self.pending = Some(p);
                Err(self)
            }
        }
    }

    /// Like [`Self::test`], also returning the data buffer.
    #[allow(clippy::result_large_err, reason = "rsmpi's signature: the Err is the request handed back unfinished")]
    pub fn test_with_data(mut self) -> std::result::Result<(Status, &'a D), Self> {
        let p = self.pending.take().expect("live request");
        match p.test() {
            Ok(r) => {
                // SAFETY: registered in `from_parts`, left once (`self` is forgotten below, so
                // `Drop` does not run).
                unsafe { self.scope.unregister() };
                let d = self.data;
                std::mem::forget(self);
                let st = r.or_fatal();
                // SAFETY: `d` is this request's buffer, and `test` found it completed.
                Ok((st, unsafe { completed_data(d) }))
            }
            Err(p) => {
                self.pending = Some(p);
                Err(self)
            }
        }
    }

    /// Asks for cancellation (a receive not yet matched is cancelled); the request must still
    /// be waited for.
    pub fn cancel(&self) {
        if let Some(p) = &self.pending {
            p.cancel();
        }
    }

    /// Moves the request to a narrower scope.
    pub fn shrink_scope_to<'b, S2>(mut self, scope: S2) -> Request<'b, D, S2>
    where
        'a: 'b,
        S2: Scope<'b>,
    {
        let p = self.pending.take().expect("live request");
        // SAFETY: registered in `from_parts`, left once (`self` is forgotten below, so `Drop`
        // does not run); the new request registers with the new scope.
        unsafe { self.scope.unregister() };
        let d = self.data;
        std::mem::forget(self);
        Request::from_parts(p, d, scope)
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    /// Makes a request of a handle from [`Request::into_raw`], on `data` in `scope`.
    ///
    /// # Safety
    /// `request` must come from `into_raw` (and not have been completed by `MPI_Wait` or
    /// `MPI_Test` since), `data` be that request's buffer, and `scope` one the buffer
    /// outlives. Panics if `request` names no such request.
    pub unsafe fn from_raw(request: crate::handles::MPI_Request, data: &'a D, scope: S) -> Self {
        let p = request_from_raw(request)
            .unwrap_or_else(|| panic!("Request::from_raw: {request:?} names no request handed over by into_raw"));
        Self::from_parts(p, NonNull::from(data), scope)
    }

    /// Hands the request over to a raw handle (completed by `mpi::ffi::MPI_Wait`/`MPI_Test`
    /// or made a `Request` again by [`Request::from_raw`]); returns it with the buffer and
    /// the scope, which no longer counts the request.
    ///
    /// # Safety
    /// The buffer must stay valid, and not be used otherwise (for a receive: not read),
    /// until the request completes; nothing checks that any more.
    pub unsafe fn into_raw(mut self) -> (crate::handles::MPI_Request, &'a D, S) {
        let p = self.pending.take().expect("live request");
        // SAFETY: registered in `from_parts`, and `pending` is now empty: the request leaves
        // its scope once.
        unsafe { self.scope.unregister() };
        let data = self.data;
        // SAFETY: the scope is read out once, and `self` is forgotten right after, so it is
        // neither dropped twice nor used again (`Drop` would do nothing: `pending` is empty).
        let scope = unsafe { std::ptr::read(&self.scope) };
        std::mem::forget(self);
        // SAFETY: `data` is the buffer borrowed for `'a`; the caller vouches for its use.
        (request_into_raw(p), unsafe { data.as_ref() }, scope)
    }
}

// SAFETY: the handle number is derived from the request's own id, the same that `into_raw`
// hands over.
unsafe impl<'a, D: ?Sized, S: Scope<'a>> crate::raw::AsRaw for Request<'a, D, S> {
    type Raw = crate::handles::MPI_Request;
    fn as_raw(&self) -> crate::handles::MPI_Request {
        self.pending.as_ref().map_or(crate::handles::predefined::RSMPI_REQUEST_NULL, request_number)
    }
}

// SAFETY: as for `Request`.
unsafe impl<'a, D: ?Sized, S: Scope<'a>> crate::raw::AsRaw for WaitGuard<'a, D, S> {
    type Raw = crate::handles::MPI_Request;
    fn as_raw(&self) -> crate::handles::MPI_Request {
        self.0.as_ref().map_or(crate::handles::predefined::RSMPI_REQUEST_NULL, |r| r.as_raw())
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Drop for Request<'a, D, S> {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.abandon();
            // SAFETY: registered in `from_parts`, still pending so never unregistered.
            unsafe { self.scope.unregister() };
            if !std::thread::panicking() {
                panic!("request was dropped without being completed");
            }
        }
    }
}

impl<'a, D: ?Sized + fmt::Debug, S: Scope<'a>> fmt::Debug for Request<'a, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the data: a receive may be writing it.
        f.debug_struct("Request").field("pending", &self.pending.is_some()).finish_non_exhaustive()
    }
}

/// Waits for a request when dropped.
#[derive(Debug)]
pub struct WaitGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for WaitGuard<'a, D, S> {
    fn drop(&mut self) {
        self.0.take().expect("invalid WaitGuard").wait();
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(req: Request<'a, D, S>) -> Self {
        WaitGuard(Some(req))
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for Request<'a, D, S> {
    fn from(mut g: WaitGuard<'a, D, S>) -> Self {
        g.0.take().expect("invalid WaitGuard")
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> WaitGuard<'a, D, S> {
    fn cancel(&self) {
        if let Some(r) = &self.0 {
            r.cancel();
        }
    }
}

/// Cancels, then waits for, a request when dropped.
#[derive(Debug)]
pub struct CancelGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(WaitGuard<'a, D, S>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for CancelGuard<'a, D, S> {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(req: Request<'a, D, S>) -> Self {
        CancelGuard(WaitGuard::from(req))
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(g: WaitGuard<'a, D, S>) -> Self {
        CancelGuard(g)
    }
}
impl<'a, D: ?Sized, S: Scope<'a>> From<CancelGuard<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(mut g: CancelGuard<'a, D, S>) -> Self {
        let inner = WaitGuard(g.0 .0.take());
        std::mem::forget(g);
        inner
    }
}

/// Waits for any request of `requests`, removes it and returns its former index and status.
/// `None` if the vector is empty.
pub fn wait_any<'a, D, S: Scope<'a>>(requests: &mut Vec<Request<'a, D, S>>) -> Option<(usize, Status)> {
    if requests.is_empty() {
        return None;
    }
    let (i, r) = try_wait_any(requests)?;
    Some((i, r.or_fatal()))
}

/// Like [`wait_any`], returning the completed request's failure instead of stopping: a
/// receive from `ANY_SOURCE` of a fault-aware program fails (naming the member) while a member
/// of its communicator failed and was not acknowledged, unless a message matched it first
/// (ULFM's semantics, [`crate::ulfm`]).
pub fn try_wait_any<'a, D, S: Scope<'a>>(requests: &mut Vec<Request<'a, D, S>>) -> Option<(usize, Result<Status>)> {
    if requests.is_empty() {
        return None;
    }
    let ids: Vec<Option<ReqId>> = requests.iter().map(|r| Some(r.pending.as_ref().expect("live request").id)).collect();
    // A choice point in a replicated job: every replica completes the request its master did.
    let c = with_engine(|e| e.completion_point());
    let pendings: Vec<&Pending> = requests.iter().filter_map(|r| r.pending.as_ref()).collect();
    let found = wait_until(None, |e| done_or_orphaned(e, c, &ids, true, pendings.iter().copied()).map(|d| Ok(d[0])));
    drop(pendings);
    // On a fatal error of the library, the first request is given back failed with it.
    let i = found.unwrap_or(0);
    let req = requests.remove(i);
    Some((i, req.try_wait()))
}

/// Waits for any of `pendings` (not empty) to complete; returns its index (the first one on
/// a fatal error of the library). For `mpi::ffi`'s `MPI_Waitany`.
pub(crate) fn wait_any_pending(pendings: &[&Pending]) -> usize {
    if let Some(i) = pendings.iter().position(|p| p.id == crate::device::DONE) {
        return i;
    }
    let ids: Vec<Option<ReqId>> = pendings.iter().map(|p| Some(p.id)).collect();
    // A choice point in a replicated job: every replica completes the request its master did.
    let c = with_engine(|e| e.completion_point());
    let found = wait_until(None, |e| done_or_orphaned(e, c, &ids, true, pendings.iter().copied()).map(|d| Ok(d[0])));
    found.unwrap_or(0)
}

/// The requests of `ids` complete now (`c`: a replicated job's choice point); without one,
/// receives from `ANY_SOURCE` that can no longer be told apart from a failed member's are
/// failed first ([`Pending::fail_if_any_source_orphaned`]).
fn done_or_orphaned<'p>(
    e: &mut crate::device::Engine,
    c: Option<u64>,
    ids: &[Option<ReqId>],
    block: bool,
    pendings: impl Iterator<Item = &'p Pending>,
) -> Option<Vec<usize>> {
    let done = e.completed_at(c, ids, block);
    // A replicated job's choice point (`c`) is answered by the master alone: on a replica
    // that follows it, `None` means its answer is not known yet, and nothing may be decided
    // here (the master's withdrawals of receives come as their outcomes).
    if (c.is_some() && e.follows()) || !crate::failure::any_failed() || done.as_ref().is_some_and(|d| !d.is_empty()) {
        return done;
    }
    let mut failed = false;
    for p in pendings {
        failed |= p.fail_if_any_source_orphaned(e);
    }
    if failed {
        return e.completed_at(c, ids, block);
    }
    done
}

/// A set of requests on the same kind of data, created by [`multiple_scope`].
pub struct RequestCollection<'a, D: ?Sized> {
    /// Pending requests and their buffers (pointers as in [`Request`]).
    slots: Vec<Option<(Pending, NonNull<D>)>>,
    phantom: PhantomData<(Cell<&'a ()>, &'a D)>,
}

// SAFETY: as for `Request`: `Pending`s, and pointers that stand for `&'a D` borrows.
unsafe impl<'a, D: ?Sized + Sync> Send for RequestCollection<'a, D> {}

/// Runs `f` with a scope and an empty request collection (with room for `reserve`).
pub fn multiple_scope<'a, F, R, D>(reserve: usize, f: F) -> R
where
    D: 'a + ?Sized,
    F: FnOnce(&LocalScope<'a>, &mut RequestCollection<'a, D>) -> R,
{
    scope(|s| {
        let mut coll = RequestCollection { slots: Vec::with_capacity(reserve), phantom: PhantomData };
        f(s, &mut coll)
    })
}

impl<'a, D: ?Sized> RequestCollection<'a, D> {
    /// Number of requests not completed yet.
    pub fn incomplete(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Adds a request; returns its index.
    pub fn add<S: Scope<'a>>(&mut self, req: Request<'a, D, S>) -> usize {
        let (p, d) = req.take();
        self.slots.push(Some((p, d)));
        self.slots.len() - 1
    }

    fn complete(&mut self, i: usize) -> (usize, Status, &'a D) {
        let (i, st, d) = self.try_complete(i);
        (i, st.or_fatal(), d)
    }

    fn try_complete(&mut self, i: usize) -> (usize, Result<Status>, &'a D) {
        let (p, d) = self.slots[i].take().expect("active slot");
        let st = p.wait();
        // SAFETY: `d` is the buffer of the request taken from a `Request` in `add` (borrowed
        // for `'a`), and `wait` returned: it completed (or failed, and nothing points into
        // the buffer any more).
        (i, st, unsafe { completed_data(d) })
    }

    fn pendings(&self) -> impl Iterator<Item = &Pending> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(p, _)| p))
    }

    fn ids(&self) -> Vec<Option<ReqId>> {
        self.slots.iter().map(|s| s.as_ref().map(|(p, _)| p.id)).collect()
    }

    /// The requests complete now (in a replicated job, as the master saw them: a choice point).
    fn done_indices(&self) -> Vec<usize> {
        let ids = self.ids();
        let c = with_engine(|e| {
            e.progress(None, None);
            e.completion_point()
        });
        wait_until(None, |e| done_or_orphaned(e, c, &ids, false, self.pendings()).map(Ok)).or_fatal()
    }

    fn wait_for_some(&self) -> Result<Vec<usize>> {
        let ids = self.ids();
        let c = with_engine(|e| e.completion_point());
        wait_until(None, |e| done_or_orphaned(e, c, &ids, true, self.pendings()).map(Ok))
    }

    /// Like [`Self::wait_any`], returning the completed request's failure instead of stopping
    /// (a receive from `ANY_SOURCE` fails while a member failed unacknowledged, see
    /// [`try_wait_any`]).
    pub fn try_wait_any(&mut self) -> Option<(usize, Result<Status>, &'a D)> {
        if self.incomplete() == 0 {
            return None;
        }
        let i = self.wait_for_some().or_fatal()[0];
        Some(self.try_complete(i))
    }

    /// Like [`Self::test_any`], returning the completed request's failure instead of stopping.
    pub fn try_test_any(&mut self) -> Option<(usize, Result<Status>, &'a D)> {
        self.done_indices().first().map(|&i| self.try_complete(i))
    }

    /// Waits for one request; `None` if none is active.
    pub fn wait_any(&mut self) -> Option<(usize, Status, &'a D)> {
        if self.incomplete() == 0 {
            return None;
        }
        let i = self.wait_for_some().or_fatal()[0];
        Some(self.complete(i))
    }

    /// Waits until at least one request completes; `result` receives every completed one.
    pub fn wait_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        if self.incomplete() == 0 {
            return;
        }
        for i in self.wait_for_some().or_fatal() {
            result.push(self.complete(i));
        }
    }

    /// Waits for every request; `result` receives them all.
    pub fn wait_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() {
                result.push(self.complete(i));
            }
        }
    }

    /// Completes one finished request, if any.
    pub fn test_any(&mut self) -> Option<(usize, Status, &'a D)> {
        self.done_indices().first().map(|&i| self.complete(i))
    }

    /// Completes every finished request into `result`.
    pub fn test_some(&mut self, result: &mut Vec<(usize, Status, &'a D)>) {
        result.clear();
        for i in self.done_indices() {
            result.push(self.complete(i));
        }
    }

    /// If every request finished, completes them all into `result` and returns `true`.
    pub fn test_all(&mut self, result: &mut Vec<(usize, Status, &'a D)>) -> bool {
        result.clear();
        if self.done_indices().len() != self.incomplete() {
            return false;
        }
        self.wait_all(result);
        true
    }
}

impl<D: ?Sized> Drop for RequestCollection<'_, D> {
    fn drop(&mut self) {
        if self.incomplete() != 0 && !std::thread::panicking() {
            for (p, _) in self.slots.iter_mut().filter_map(Option::take) {
                p.abandon();
            }
            panic!("some requests have not completed");
        }
    }
}

// ---------------------------------------------------------------------- C handles

/// The requests handed over to C handles (`Request::into_raw`, `MPI_Isend`, ...), see
/// [`crate::handles`]: process-wide because a handle is a plain integer any thread may hand to
/// any function.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub(crate) static REQUESTS: std::sync::LazyLock<std::sync::Mutex<crate::handles::NumberMap<Pending>>> =
    std::sync::LazyLock::new(Default::default);

/// The handle number of a request (derived from the engine's request id, so that a
/// request's `as_raw` and `into_raw` agree).
pub(crate) fn request_number(p: &Pending) -> MPI_Request {
    MPI_Request((p.id % (c_int::MAX as usize - 1)) as c_int + 1)
}

/// Hands a pending request over to a handle.
pub(crate) fn request_into_raw(p: Pending) -> MPI_Request {
    let h = request_number(&p);
    crate::handles::lock(&REQUESTS).insert(h.0, p);
    h
}

/// Takes a pending request back from its handle.
pub(crate) fn request_from_raw(h: MPI_Request) -> Option<Pending> {
    crate::handles::lock(&REQUESTS).remove(&h.0)
}

/// Handle numbers of requests handed over by `mpi::ffi`'s C functions and by
/// [`Detached::into_raw`]: negative, so that they never meet the numbers of requests handed
/// over by `Request::into_raw` (positive, derived from the request's id), and unique even for
/// requests finished on the spot (which share one id).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static NEXT_REQUEST: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Hands a pending request over to a new handle of its own (see [`NEXT_REQUEST`]).
pub(crate) fn request_into_new_raw(p: Pending) -> MPI_Request {
    use std::sync::atomic::Ordering;
    let mut h = NEXT_REQUEST.fetch_sub(1, Ordering::Relaxed);
    if h >= 0 || h == c_int::MIN {
        // Wrapped around after 2^31 requests: start again (older ones are long gone).
        NEXT_REQUEST.store(-2, Ordering::Relaxed);
        h = -1;
    }
    crate::handles::lock(&REQUESTS).insert(h, p);
    MPI_Request(h)
}

// ---------------------------------------------------------------------- detached requests

/// A request of an immediate operation detached from its buffer's borrow and its scope: for
/// bindings to other languages (the MPICH ABI's `MPI_Request`), whose callers keep the
/// buffers valid themselves, and which hold the request in their own table of handles rather
/// than in this library's (`mpi::ffi`'s). Completed by [`Detached::test`] (which tests it
/// in place: in a replicated job a choice point, as [`Request::test`]) or
/// [`Detached::wait`], or handed over to a handle of `mpi::ffi` ([`Detached::into_raw`]).
/// Started by [`Detached::send`] and [`Detached::receive`], or made of a [`Request`] by
/// [`Request::detach`]. Dropping one unfinished (neither waited for nor tested
/// finished) cancels it and waits for it.
#[must_use]
pub struct Detached(Option<Pending>);

// SAFETY: through a shared reference a `Detached` only asks the engine, under its lock, to
// cancel the request by its id (and says whether it is live): the raw pointers of its
// `Pending` are never used through one.
unsafe impl Sync for Detached {}

impl Detached {
    /// The detached request of `p`.
    #[inline]
    pub(crate) fn of(p: Pending) -> Detached {
        Detached(Some(p))
    }

    /// The outcome if the operation finished (a failure of the communication as an error;
    /// the request is then spent), else `None`.
    #[inline]
    pub fn test(&mut self) -> Option<Result<Status>> {
        match self.0.as_ref().expect("live request").poll() {
            Polled::NotYet => None,
            Polled::Failed(e) => {
                self.0 = None;
                Some(Err(e))
            }
            Polled::Done(r) => Some(self.0.take().expect("live request").finish(r)),
        }
    }

    /// Waits for the operation to finish; its outcome.
    pub fn wait(mut self) -> Result<Status> {
        self.0.take().expect("live request").wait()
    }

    /// Asks for cancellation (a receive not matched yet is cancelled); the request must still
    /// be completed.
    pub fn cancel(&self) {
        if let Some(p) = &self.0 {
            p.cancel();
        }
    }

    /// Hands the request over to a new handle of `mpi::ffi` (completed by its `MPI_Wait`,
    /// `MPI_Test`, `MPI_Waitall`, ..., or freed by `MPI_Request_free`).
    pub fn into_raw(mut self) -> MPI_Request {
        request_into_new_raw(self.0.take().expect("live request"))
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.abandon();
        }
    }
}

impl fmt::Debug for Detached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Detached").field("pending", &self.0.is_some()).finish()
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> Request<'a, D, S> {
    /// Detaches the request from its buffer and scope (which no longer counts it).
    ///
    /// # Safety
    /// As for [`Request::into_raw`]: the buffer must stay valid, and not be used otherwise
    /// (for a receive: not read), until the request completes; nothing checks that any more.
    pub unsafe fn detach(mut self) -> Detached {
        let p = self.pending.take().expect("live request");
        // SAFETY: registered in `from_parts`, and `pending` is now empty: the request leaves
        // its scope once (and `Drop`, finding `pending` empty, does nothing more).
        unsafe { self.scope.unregister() };
        Detached(Some(p))
    }
}
