//! Point-to-point communication, with rsmpi's traits: [`Source`] (receive, probe) and
//! [`Destination`] (send in standard, buffered, synchronous and ready modes, blocking or
//! immediate).
//!
//! Beyond rsmpi:
//! * every operation has a `try_*` form that returns an [`Error`](crate::Error) instead of
//!   stopping the process (the plain forms stop it with a message naming the rank and cause);
//! * `send_object` / `receive_object` carry any `serde` value (the seeds' OBJECT datatype).

use crate::context::{wait_until, with_engine};
use crate::datatype::{Buffer, BufferMut, Equivalence, TypeMap, UncommittedDatatype};
use crate::device::{Matched, SendMode};
use crate::error::{Error, OrFatal, Result};
use crate::request::{Detached, Pending, Request, Scope, Unpack};
use crate::topology::{AsCommunicator, CommHandle, Communicator, CommunicatorRelation, Rank};
use crate::Tag;
use p2pmpi_core::matching::Pattern;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// Matches any tag in receives and probes.
pub const ANY_TAG: Tag = -1;
/// Matches any source (used by [`AnyProcess`](crate::topology::AnyProcess)).
pub const ANY_SOURCE: Rank = -2;

pub use crate::request::Status;

// ------------------------------------------------------------------ the operations

fn pattern(h: &CommHandle, src: Rank, tag: Tag) -> Pattern {
    Pattern {
        comm: h.p2p_id(),
        src: if src < 0 { None } else { Some(h.world_rank(src)) },
        tag: if tag == ANY_TAG { None } else { Some(tag) },
    }
}

fn hint(h: &CommHandle, src: Rank) -> Option<Rank> {
    (src >= 0).then(|| h.world_rank(src))
}

fn status_of(h: &CommHandle, env: &p2pmpi_core::matching::Envelope) -> Status {
    Status {
        source: crate::topology::comm_rank_of(&h.members(), env.src),
        tag: env.tag,
        bytes: env.len,
        cancelled: false,
    }
}

/// Bytes of a buffer to send: borrowed if contiguous, else packed.
fn send_bytes<B: ?Sized + Buffer>(buf: &B) -> (*const u8, usize, Option<Vec<u8>>) {
    let dt = buf.as_datatype();
    let map = dt.type_map();
    let count = buf.count().max(0) as usize;
    if map.is_contiguous() {
        (buf.pointer() as *const u8, count * map.size(), None)
    } else {
        let mut v = Vec::new();
        // SAFETY: `Buffer`'s contract: `buf.pointer()` is readable for `count` initialised
        // elements of its datatype while `buf` is borrowed.
        unsafe { map.pack(buf.pointer() as *const u8, count, &mut v) };
        (v.as_ptr(), v.len(), Some(v))
    }
}

/// Where the received bytes of `count` elements of `map` at `ptr` go: straight there if the
/// layout may be received in place (contiguous, no `bool`), else a staging area that
/// [`Pending::finish`] unpacks there.
fn raw_target(ptr: *mut u8, map: &TypeMap, count: usize) -> (*mut u8, usize, Option<Unpack>) {
    if map.receives_in_place() {
        (ptr, count * map.size(), None)
    } else {
        let mut tmp = vec![0u8; count * map.size()];
        let p = tmp.as_mut_ptr();
        (p, tmp.len(), Some(Unpack { tmp, dst: ptr, map: map.clone(), count }))
    }
}

/// Where received bytes for `buf` go.
fn recv_target<B: ?Sized + BufferMut>(buf: &mut B) -> (*mut u8, usize, Option<Unpack>) {
    let dt = buf.as_datatype();
    let count = buf.count().max(0) as usize;
    raw_target(buf.pointer_mut() as *mut u8, dt.type_map(), count)
}

/// Where the bytes of one received `T` go: into `slot`, room for a `T` that is not
/// initialised (so only raw pointers to it are ever made, never a reference to a `T`).
/// `T`'s layout describes its `size_of::<T>()` bytes (`Equivalence`'s contract).
fn value_target<T: Equivalence>(slot: *mut T) -> (*mut u8, usize, Option<Unpack>) {
    raw_target(slot.cast(), T::equivalent_datatype().type_map(), 1)
}

/// Whether a completed receive of one `T` brought a whole `T` (a shorter message leaves part
/// of it unwritten).
fn whole_value<T: Equivalence>(st: &Status) -> Result<()> {
    let size = T::equivalent_datatype().type_map().size();
    if st.bytes == size as u64 {
        Ok(())
    } else {
        Err(Error::SizeMismatch { expected: size, got: st.bytes })
    }
}

pub(crate) fn start_send(
    h: &CommHandle,
    comm_id: u32,
    dst: Rank,
    tag: Tag,
    ptr: *const u8,
    len: usize,
    mode: SendMode,
) -> Result<Pending> {
    if dst < 0 || dst >= h.size() {
        return Err(Error::InvalidRank { rank: dst, size: h.size() });
    }
    let w = h.world_rank(dst);
    let id = with_engine(|e| e.isend(comm_id, w, tag, ptr, len, mode))?;
    Ok(Pending::new(id, Some(w), None))
}

fn send_impl<B: ?Sized + Buffer>(h: &CommHandle, dst: Rank, buf: &B, tag: Tag, mode: SendMode) -> Result<()> {
    let (ptr, len, keep) = send_bytes(buf);
    let p = start_send(h, h.p2p_id(), dst, tag, ptr, len, mode)?;
    if p.id != crate::device::DONE {
        // (A send finished on the spot, the usual eager one, has nothing to wait for.)
        p.wait()?;
    }
    drop(keep);
    Ok(())
}

fn isend_impl<'a, B: ?Sized + Buffer, S: Scope<'a>>(
    h: &CommHandle,
    dst: Rank,
    scope: S,
    buf: &'a B,
    tag: Tag,
    mode: SendMode,
) -> Result<Request<'a, B, S>> {
    let (ptr, len, keep) = send_bytes(buf);
    let mut p = start_send(h, h.p2p_id(), dst, tag, ptr, len, mode)?;
    p.keep = keep;
    Ok(Request::new(p, buf, scope))
}

/// Starts sending `buf` to `d` with `tag` (for `mpi::ffi`'s non-blocking sends): the
/// request, its packed copy of the data kept with it.
pub(crate) fn try_isend<D: ?Sized + Destination, B: ?Sized + Buffer>(
    d: &D,
    buf: &B,
    tag: Tag,
    mode: SendMode,
) -> Result<Pending> {
    let (ptr, len, keep) = send_bytes(buf);
    let h = Destination::comm_handle(d);
    let mut p = start_send(h, h.p2p_id(), d.destination_rank(), tag, ptr, len, mode)?;
    p.keep = keep;
    Ok(p)
}

/// Starts receiving into `buf` from `s` with `tag` (for `mpi::ffi`'s `MPI_Irecv`).
pub(crate) fn try_irecv<S: ?Sized + Source, B: ?Sized + BufferMut>(s: &S, buf: &mut B, tag: Tag) -> Result<Pending> {
    irecv_buf(Source::comm_handle(s), s.source_rank(), tag, buf)
}

impl Detached {
    /// Starts sending `buf` to `d` with `tag` (`synchronous`: completing once the receiver
    /// matched it), detached: for bindings that hold their requests themselves (see
    /// [`Detached`]), as [`Destination::immediate_send_with_tag`] would start it, but
    /// returning an error (a communicator revoked, a peer lost) instead of stopping.
    ///
    /// # Safety
    /// `buf`'s data must stay valid and unchanged until the request completes (nothing checks
    /// it, as for [`Request::into_raw`]).
    pub unsafe fn send<D: ?Sized + Destination, B: ?Sized + Buffer>(
        d: &D,
        buf: &B,
        tag: Tag,
        synchronous: bool,
    ) -> Result<Detached> {
        let mode = if synchronous { SendMode::Synchronous } else { SendMode::Standard };
        try_isend(d, buf, tag, mode).map(Detached::of)
    }

    /// Starts receiving into `buf` from `s` with `tag`, detached (see [`Detached::send`]);
    /// nothing is left posted when it fails.
    ///
    /// # Safety
    /// `buf` must stay valid, and not be used otherwise (not read), until the request
    /// completes.
    pub unsafe fn receive<S: ?Sized + Source, B: ?Sized + BufferMut>(s: &S, buf: &mut B, tag: Tag) -> Result<Detached> {
        try_irecv(s, buf, tag).map(Detached::of)
    }
}

/// Whether a message from `s` with `tag` is waiting, returning errors (`MPI_Iprobe`).
pub(crate) fn try_iprobe<S: ?Sized + Source>(s: &S, tag: Tag) -> Result<Option<Status>> {
    iprobe_impl(Source::comm_handle(s), s.source_rank(), tag)
}

pub(crate) fn start_recv(
    h: &CommHandle,
    comm_id: u32,
    src: Rank,
    tag: Tag,
    ptr: *mut u8,
    cap: usize,
) -> Result<Pending> {
    let mut pat = pattern(h, src, tag);
    pat.comm = comm_id;
    let id = with_engine(|e| e.irecv(pat, ptr, cap))?;
    let mut p = Pending::new(id, hint(h, src), h.members());
    if src == ANY_SOURCE && crate::failure::policy() == crate::failure::Policy::Notify {
        p.any_source_ctx = Some(h.0.ctx);
    }
    Ok(p)
}

fn irecv_buf<B: ?Sized + BufferMut>(h: &CommHandle, src: Rank, tag: Tag, buf: &mut B) -> Result<Pending> {
    let (ptr, cap, unpack) = recv_target(buf);
    let mut p = start_recv(h, h.p2p_id(), src, tag, ptr, cap)?;
    p.unpack = unpack;
    Ok(p)
}

fn recv_into_impl<B: ?Sized + BufferMut>(h: &CommHandle, src: Rank, tag: Tag, buf: &mut B) -> Result<Status> {
    irecv_buf(h, src, tag, buf)?.wait()
}

/// Receives exactly one value of `T`.
fn recv_value<T: Equivalence>(h: &CommHandle, src: Rank, tag: Tag) -> Result<(T, Status)> {
    let mut v = MaybeUninit::<T>::uninit();
    let (ptr, cap, unpack) = value_target(v.as_mut_ptr());
    let mut p = start_recv(h, h.p2p_id(), src, tag, ptr, cap)?;
    p.unpack = unpack;
    // `v` stays in place until the receive is over: `wait` returns only once it completed, or
    // failed and was detached from the device.
    let st = p.wait()?;
    if st.bytes == 0 {
        panic!("Received an empty message.");
    }
    whole_value::<T>(&st)?;
    // SAFETY: the receive completed with exactly `size` bytes, `T`'s data: written straight
    // into `v` (a contiguous layout: those bytes are all of `T`, which has no padding) or
    // unpacked into each of `T`'s data blocks; padding needs no value. Every bit pattern of
    // the data is a valid `T` (`Equivalence`'s contract; `bool` data was unpacked to 0 or 1).
    Ok((unsafe { v.assume_init() }, st))
}

// Probes are choice points of a replicated job (`p2pmpi_core::replication::Choices`) when
// their outcome depends on arrival order: the master decides, its replicas follow.

/// Why a blocking probe for `pat` on `h` can never succeed: its communicator was revoked,
/// or — a program that handles failures, unreplicated — the rank it names is lost, or, for
/// `ANY_SOURCE`, a member failed that this process has not acknowledged (as for receives,
/// [`crate::ulfm`]).
fn probe_blocked(e: &mut crate::device::Engine, h: &CommHandle, pat: &Pattern, c: Option<u64>) -> Option<Error> {
    if e.replicated() {
        // The master decides, and tells its replicas at the probe's choice point (a probe
        // naming its source has none: a replica follows only a wildcard one).
        if let Some(err) = e.choice_failure(c) {
            return Some(err);
        }
        if e.follows() {
            return None;
        }
    }
    let err = probe_blocked_here(e, h, pat)?;
    e.decide_probe_failure(c, &err);
    Some(err)
}

fn probe_blocked_here(e: &mut crate::device::Engine, h: &CommHandle, pat: &Pattern) -> Option<Error> {
    if e.is_revoked(pat.comm) {
        return Some(Error::Revoked);
    }
    if crate::failure::policy() != crate::failure::Policy::Notify {
        return None;
    }
    match pat.src {
        Some(src) => e.lost_cause(src).map(|cause| Error::PeerLost { rank: src, cause }),
        None => {
            let members = h.members();
            let w = crate::context::unacked_failure(h.0.ctx, members.as_deref())?;
            Some(Error::PeerLost {
                rank: w,
                cause: "failed, and not acknowledged on this communicator (a probe from any source cannot tell whether its message would have come from it; acknowledge with failure_ack and probe again)".into(),
            })
        }
    }
}

fn probe_impl(h: &CommHandle, src: Rank, tag: Tag) -> Result<Status> {
    let pat = pattern(h, src, tag);
    let c = with_engine(|e| e.probe_point(&pat, false));
    let env = wait_until(hint(h, src), |e| match e.probe_at(c, pat, false) {
        Some(f) => Some(Ok(f.expect("found"))),
        None => probe_blocked(e, h, &pat, c).map(Err),
    })?;
    Ok(status_of(h, &env))
}

fn iprobe_impl(h: &CommHandle, src: Rank, tag: Tag) -> Result<Option<Status>> {
    let pat = pattern(h, src, tag);
    let c = with_engine(|e| {
        if let Some(f) = &e.fatal {
            return Err(f.clone());
        }
        e.progress(hint(h, src), None);
        Ok(e.probe_point(&pat, true))
    })?;
    let found = wait_until(hint(h, src), |e| e.probe_at(c, pat, true).map(Ok))?;
    Ok(found.map(|env| status_of(h, &env)))
}

fn mprobe_impl(h: &CommHandle, src: Rank, tag: Tag) -> Result<(Message, Status)> {
    let pat = pattern(h, src, tag);
    let c = with_engine(|e| e.probe_point(&pat, false));
    let m = wait_until(hint(h, src), |e| match e.mprobe_at(c, pat, false) {
        Some(m) => Some(Ok(m.expect("found"))),
        None => probe_blocked(e, h, &pat, c).map(Err),
    })?;
    let st = status_of(h, &m.env);
    Ok((Message { matched: Some(m), handle: h.clone(), raw: crate::handles::MPI_Message::next() }, st))
}

fn improbe_impl(h: &CommHandle, src: Rank, tag: Tag) -> Result<Option<(Message, Status)>> {
    let pat = pattern(h, src, tag);
    let c = with_engine(|e| {
        if let Some(f) = &e.fatal {
            return Err(f.clone());
        }
        e.progress(hint(h, src), None);
        Ok(e.probe_point(&pat, true))
    })?;
    let m = wait_until(hint(h, src), |e| e.mprobe_at(c, pat, true).map(Ok))?;
    Ok(m.map(|m| {
        let st = status_of(h, &m.env);
        (Message { matched: Some(m), handle: h.clone(), raw: crate::handles::MPI_Message::next() }, st)
    }))
}

/// Receives a whole message as a vector of `T`.
fn recv_vec_impl<T: Equivalence>(h: &CommHandle, src: Rank, tag: Tag) -> Result<(Vec<T>, Status)> {
    let (msg, st) = mprobe_impl(h, src, tag)?;
    msg.try_matched_receive_vec_with(st)
}

// ------------------------------------------------------------------ buffered sends

// The state of buffered sends is the context's (`Context::buffered`): a send pending there is
// kept as its request id and peer (what `start_send`'s `Pending` holds) with its data.

pub(crate) fn set_bsend_capacity(n: usize) {
    crate::context::current().buffered.lock().capacity = n;
}

/// Waits until every buffered send has left the attached buffer.
pub(crate) fn drain_bsend() {
    let pending = std::mem::take(&mut crate::context::current().buffered.lock().pending);
    for (id, hint, data) in pending {
        let _ = Pending::new(id, hint, None).wait();
        drop(data);
    }
}

fn bsend_impl<B: ?Sized + Buffer>(h: &CommHandle, dst: Rank, buf: &B, tag: Tag) -> Result<()> {
    let mut b = crate::context::current().buffered.lock();
    // Reclaim the space of sends that completed.
    let pending = std::mem::take(&mut b.pending);
    for (id, hint, data) in pending {
        match Pending::new(id, hint, None).test() {
            Ok(_) => drop(data),
            Err(p) => b.pending.push((p.id, p.hint, data)),
        }
    }
    let (ptr, len, keep) = send_bytes(buf);
    let data = keep.unwrap_or_else(|| {
        // SAFETY: without a packed copy, `send_bytes` gave the contiguous data of `buf` in
        // place: `len` initialised bytes at `ptr`, readable while `buf` is borrowed.
        unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec()
    });
    let used: usize = b.pending.iter().map(|(_, _, d)| d.len()).sum();
    if used + data.len() > b.capacity {
        return Err(Error::BufferExhausted { needed: data.len(), free: b.capacity - used, size: b.capacity });
    }
    let p = start_send(h, h.p2p_id(), dst, tag, data.as_ptr(), data.len(), SendMode::Standard)?;
    match p.test() {
        Ok(r) => r.map(|_| ()),
        Err(p) => {
            b.pending.push((p.id, p.hint, data));
            Ok(())
        }
    }
}

// ------------------------------------------------------------------ traits

/// Something that can be received from: a [`Process`](crate::topology::Process) or
/// [`AnyProcess`](crate::topology::AnyProcess).
///
/// # Safety
/// `source_rank` must be a valid rank of the communicator or [`ANY_SOURCE`].
pub unsafe trait Source: AsCommunicator {
    /// The rank received from (`ANY_SOURCE` for any).
    fn source_rank(&self) -> Rank;

    #[doc(hidden)]
    fn comm_handle(&self) -> &CommHandle {
        use crate::topology::sealed::AsHandle;
        self.as_communicator().handle()
    }

    /// Waits for a message with `tag` without receiving it.
    fn probe_with_tag(&self, tag: Tag) -> Status {
        probe_impl(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Waits for a message without receiving it.
    fn probe(&self) -> Status {
        self.probe_with_tag(ANY_TAG)
    }
    /// Removes a message with `tag` from the queue; receive it with the returned [`Message`].
    fn matched_probe_with_tag(&self, tag: Tag) -> (Message, Status) {
        mprobe_impl(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Removes a message from the queue; receive it with the returned [`Message`].
    fn matched_probe(&self) -> (Message, Status) {
        self.matched_probe_with_tag(ANY_TAG)
    }
    /// Receives one value with `tag`.
    fn receive_with_tag<Msg>(&self, tag: Tag) -> (Msg, Status)
    where
        Msg: Equivalence,
    {
        recv_value(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Receives one value.
    fn receive<Msg>(&self) -> (Msg, Status)
    where
        Msg: Equivalence,
    {
        self.receive_with_tag(ANY_TAG)
    }
    /// Receives a message with `tag` into `buf`.
    fn receive_into_with_tag<Buf: ?Sized>(&self, buf: &mut Buf, tag: Tag) -> Status
    where
        Buf: BufferMut,
    {
        recv_into_impl(self.comm_handle(), self.source_rank(), tag, buf).or_fatal()
    }
    /// Receives a message into `buf`.
    fn receive_into<Buf: ?Sized>(&self, buf: &mut Buf) -> Status
    where
        Buf: BufferMut,
    {
        self.receive_into_with_tag(buf, ANY_TAG)
    }
    /// Receives a whole message with `tag` as a vector.
    fn receive_vec_with_tag<Msg>(&self, tag: Tag) -> (Vec<Msg>, Status)
    where
        Msg: Equivalence,
    {
        recv_vec_impl(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Receives a whole message as a vector.
    fn receive_vec<Msg>(&self) -> (Vec<Msg>, Status)
    where
        Msg: Equivalence,
    {
        self.receive_vec_with_tag(ANY_TAG)
    }
    /// Starts receiving a message with `tag` into `buf`.
    fn immediate_receive_into_with_tag<'a, Sc, Buf: ?Sized>(
        &self,
        scope: Sc,
        buf: &'a mut Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        let (h, src) = (self.comm_handle(), self.source_rank());
        Request::receive(buf, scope, |buf| irecv_buf(h, src, tag, buf).or_fatal())
    }
    /// Starts receiving a message into `buf`.
    fn immediate_receive_into<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a mut Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        self.immediate_receive_into_with_tag(scope, buf, ANY_TAG)
    }
    /// Starts receiving one value with `tag`.
    fn immediate_receive_with_tag<Msg>(&self, tag: Tag) -> ReceiveFuture<Msg>
    where
        Msg: Equivalence,
    {
        // Owned as a raw pointer (not a `Box`) while the device may write into it.
        let val = NonNull::from(Box::leak(Box::new(MaybeUninit::<Msg>::uninit())));
        let (ptr, cap, unpack) = value_target(val.as_ptr().cast::<Msg>());
        let h = self.comm_handle();
        let mut p = start_recv(h, h.p2p_id(), self.source_rank(), tag, ptr, cap).or_fatal();
        p.unpack = unpack;
        ReceiveFuture { val: Some(val), pending: Some(p) }
    }
    /// Starts receiving one value.
    fn immediate_receive<Msg>(&self) -> ReceiveFuture<Msg>
    where
        Msg: Equivalence,
    {
        self.immediate_receive_with_tag(ANY_TAG)
    }
    /// Whether a message with `tag` is waiting.
    fn immediate_probe_with_tag(&self, tag: Tag) -> Option<Status> {
        iprobe_impl(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Whether a message is waiting.
    fn immediate_probe(&self) -> Option<Status> {
        self.immediate_probe_with_tag(ANY_TAG)
    }
    /// Removes a waiting message with `tag`, if any.
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Option<(Message, Status)> {
        improbe_impl(self.comm_handle(), self.source_rank(), tag).or_fatal()
    }
    /// Removes a waiting message, if any.
    fn immediate_matched_probe(&self) -> Option<(Message, Status)> {
        self.immediate_matched_probe_with_tag(ANY_TAG)
    }

    // ---- fallible variants (not in rsmpi)

    /// Like [`Source::receive_into_with_tag`], returning errors.
    fn try_receive_into_with_tag<Buf: ?Sized + BufferMut>(&self, buf: &mut Buf, tag: Tag) -> Result<Status> {
        recv_into_impl(self.comm_handle(), self.source_rank(), tag, buf)
    }
    /// Like [`Source::receive_into`], returning errors.
    fn try_receive_into<Buf: ?Sized + BufferMut>(&self, buf: &mut Buf) -> Result<Status> {
        self.try_receive_into_with_tag(buf, ANY_TAG)
    }
    /// Like [`Source::receive_with_tag`], returning errors.
    fn try_receive_with_tag<Msg: Equivalence>(&self, tag: Tag) -> Result<(Msg, Status)> {
        recv_value(self.comm_handle(), self.source_rank(), tag)
    }
    /// Like [`Source::receive`], returning errors.
    fn try_receive<Msg: Equivalence>(&self) -> Result<(Msg, Status)> {
        self.try_receive_with_tag(ANY_TAG)
    }
    /// Like [`Source::receive_vec_with_tag`], returning errors.
    fn try_receive_vec_with_tag<Msg: Equivalence>(&self, tag: Tag) -> Result<(Vec<Msg>, Status)> {
        recv_vec_impl(self.comm_handle(), self.source_rank(), tag)
    }
    /// Like [`Source::receive_vec`], returning errors.
    fn try_receive_vec<Msg: Equivalence>(&self) -> Result<(Vec<Msg>, Status)> {
        self.try_receive_vec_with_tag(ANY_TAG)
    }
    /// Like [`Source::probe_with_tag`], returning errors.
    fn try_probe_with_tag(&self, tag: Tag) -> Result<Status> {
        probe_impl(self.comm_handle(), self.source_rank(), tag)
    }
    /// Like [`Source::matched_probe_with_tag`], returning errors.
    fn try_matched_probe_with_tag(&self, tag: Tag) -> Result<(Message, Status)> {
        mprobe_impl(self.comm_handle(), self.source_rank(), tag)
    }
    /// Like [`Source::immediate_matched_probe_with_tag`], returning errors.
    fn try_immediate_matched_probe_with_tag(&self, tag: Tag) -> Result<Option<(Message, Status)>> {
        improbe_impl(self.comm_handle(), self.source_rank(), tag)
    }

    // ---- serde values (the seeds' OBJECT datatype)

    /// Receives a `serde` value with `tag` sent by [`Destination::send_object_with_tag`].
    fn try_receive_object_with_tag<T: serde::de::DeserializeOwned>(&self, tag: Tag) -> Result<(T, Status)> {
        let (bytes, st) = recv_vec_impl::<u8>(self.comm_handle(), self.source_rank(), tag)?;
        let v = postcard::from_bytes(&bytes).map_err(|e| Error::Serialization(e.to_string()))?;
        Ok((v, st))
    }
    /// Receives a `serde` value with `tag`.
    fn receive_object_with_tag<T: serde::de::DeserializeOwned>(&self, tag: Tag) -> (T, Status) {
        self.try_receive_object_with_tag(tag).or_fatal()
    }
    /// Receives a `serde` value.
    fn receive_object<T: serde::de::DeserializeOwned>(&self) -> (T, Status) {
        self.receive_object_with_tag(ANY_TAG)
    }
}

/// Something that can be sent to: a [`Process`](crate::topology::Process).
pub trait Destination: AsCommunicator {
    /// The rank sent to.
    fn destination_rank(&self) -> Rank;

    #[doc(hidden)]
    fn comm_handle(&self) -> &CommHandle {
        use crate::topology::sealed::AsHandle;
        self.as_communicator().handle()
    }

    /// Sends `buf` with `tag` (standard mode: eager up to 128 KiB, rendez-vous above).
    fn send_with_tag<Buf: ?Sized>(&self, buf: &Buf, tag: Tag)
    where
        Buf: Buffer,
    {
        send_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag, SendMode::Standard).or_fatal()
    }
    /// Sends `buf` with tag 0.
    fn send<Buf: ?Sized>(&self, buf: &Buf)
    where
        Buf: Buffer,
    {
        self.send_with_tag(buf, 0)
    }
    /// Sends `buf` through the buffer attached with `Universe::set_buffer_size`.
    fn buffered_send_with_tag<Buf: ?Sized>(&self, buf: &Buf, tag: Tag)
    where
        Buf: Buffer,
    {
        bsend_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag).or_fatal()
    }
    /// Buffered send with tag 0.
    fn buffered_send<Buf: ?Sized>(&self, buf: &Buf)
    where
        Buf: Buffer,
    {
        self.buffered_send_with_tag(buf, 0)
    }
    /// Sends `buf` and returns once the receiver has matched it.
    fn synchronous_send_with_tag<Buf: ?Sized>(&self, buf: &Buf, tag: Tag)
    where
        Buf: Buffer,
    {
        send_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag, SendMode::Synchronous).or_fatal()
    }
    /// Synchronous send with tag 0.
    fn synchronous_send<Buf: ?Sized>(&self, buf: &Buf)
    where
        Buf: Buffer,
    {
        self.synchronous_send_with_tag(buf, 0)
    }
    /// Ready-mode send (the receive must already be posted; sent as a standard send).
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must have been posted.
    unsafe fn ready_send_with_tag<Buf: ?Sized>(&self, buf: &Buf, tag: Tag)
    where
        Buf: Buffer,
    {
        self.send_with_tag(buf, tag)
    }
    /// Ready-mode send with tag 0.
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must have been posted.
    unsafe fn ready_send<Buf: ?Sized>(&self, buf: &Buf)
    where
        Buf: Buffer,
    {
        self.send_with_tag(buf, 0)
    }
    /// Starts sending `buf` with `tag`.
    fn immediate_send_with_tag<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a Buf, tag: Tag) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        isend_impl(Destination::comm_handle(self), self.destination_rank(), scope, buf, tag, SendMode::Standard)
            .or_fatal()
    }
    /// Starts sending `buf`.
    fn immediate_send<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.immediate_send_with_tag(scope, buf, 0)
    }
    /// Starts a buffered send (completes at once: the data is copied).
    fn immediate_buffered_send_with_tag<'a, Sc, Buf: ?Sized>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.buffered_send_with_tag(buf, tag);
        let id = with_engine(|e| e.completed_req());
        Request::new(Pending::new(id, None, None), buf, scope)
    }
    /// Starts a buffered send with tag 0.
    fn immediate_buffered_send<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.immediate_buffered_send_with_tag(scope, buf, 0)
    }
    /// Starts a synchronous send.
    fn immediate_synchronous_send_with_tag<'a, Sc, Buf: ?Sized>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        isend_impl(Destination::comm_handle(self), self.destination_rank(), scope, buf, tag, SendMode::Synchronous)
            .or_fatal()
    }
    /// Starts a synchronous send with tag 0.
    fn immediate_synchronous_send<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.immediate_synchronous_send_with_tag(scope, buf, 0)
    }
    /// Starts a ready-mode send.
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must have been posted.
    unsafe fn immediate_ready_send_with_tag<'a, Sc, Buf: ?Sized>(
        &self,
        scope: Sc,
        buf: &'a Buf,
        tag: Tag,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.immediate_send_with_tag(scope, buf, tag)
    }
    /// Starts a ready-mode send with tag 0.
    ///
    /// # Safety
    /// As in rsmpi: the matching receive must have been posted.
    unsafe fn immediate_ready_send<'a, Sc, Buf: ?Sized>(&self, scope: Sc, buf: &'a Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + Buffer,
        Sc: Scope<'a>,
    {
        self.immediate_send_with_tag(scope, buf, 0)
    }

    // ---- fallible variants (not in rsmpi)

    /// Like [`Destination::send_with_tag`], returning errors.
    fn try_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag) -> Result<()> {
        send_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag, SendMode::Standard)
    }
    /// Like [`Destination::send`], returning errors.
    fn try_send<Buf: ?Sized + Buffer>(&self, buf: &Buf) -> Result<()> {
        self.try_send_with_tag(buf, 0)
    }
    /// Like [`Destination::synchronous_send_with_tag`], returning errors.
    fn try_synchronous_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag) -> Result<()> {
        send_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag, SendMode::Synchronous)
    }
    /// Like [`Destination::buffered_send_with_tag`], returning errors.
    fn try_buffered_send_with_tag<Buf: ?Sized + Buffer>(&self, buf: &Buf, tag: Tag) -> Result<()> {
        bsend_impl(Destination::comm_handle(self), self.destination_rank(), buf, tag)
    }

    // ---- serde values (the seeds' OBJECT datatype)

    /// Sends any `serde` value with `tag`; receive it with [`Source::receive_object_with_tag`].
    fn try_send_object_with_tag<T: serde::Serialize + ?Sized>(&self, value: &T, tag: Tag) -> Result<()> {
        let bytes = postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))?;
        self.try_send_with_tag(&bytes[..], tag)
    }
    /// Sends any `serde` value with `tag`.
    fn send_object_with_tag<T: serde::Serialize + ?Sized>(&self, value: &T, tag: Tag) {
        self.try_send_object_with_tag(value, tag).or_fatal()
    }
    /// Sends any `serde` value with tag 0.
    fn send_object<T: serde::Serialize + ?Sized>(&self, value: &T) {
        self.send_object_with_tag(value, 0)
    }
}

// SAFETY: `ANY_SOURCE` is always a valid source.
unsafe impl Source for crate::topology::AnyProcess<'_> {
    fn source_rank(&self) -> Rank {
        ANY_SOURCE
    }
}
// SAFETY: a `Process` is made for a rank of its communicator (`process_at_rank` checks it).
unsafe impl Source for crate::topology::Process<'_> {
    fn source_rank(&self) -> Rank {
        self.rank()
    }
}
impl Destination for crate::topology::Process<'_> {
    fn destination_rank(&self) -> Rank {
        self.rank()
    }
}

// ------------------------------------------------------------------ matched messages

/// A message removed from the queues by a matched probe; it must be received.
#[must_use]
pub struct Message {
    matched: Option<Matched>,
    handle: CommHandle,
    /// Its raw handle (a number of its own; no function of `mpi::ffi` takes one).
    raw: crate::handles::MPI_Message,
}

// SAFETY: the handle is this message's own number until it is received.
unsafe impl crate::raw::AsRaw for Message {
    type Raw = crate::handles::MPI_Message;
    fn as_raw(&self) -> crate::handles::MPI_Message {
        if self.matched.is_some() {
            self.raw
        } else {
            crate::handles::predefined::RSMPI_MESSAGE_NULL
        }
    }
}

// SAFETY: the pointer is to the message's own handle field, valid while it is borrowed.
unsafe impl crate::raw::AsRawMut for Message {
    fn as_raw_mut(&mut self) -> *mut crate::handles::MPI_Message {
        &mut self.raw
    }
}

impl Message {
    /// Whether this is the "no process" message (never, here).
    pub fn is_no_proc(&self) -> bool {
        false
    }

    fn start(&mut self, ptr: *mut u8, cap: usize) -> Pending {
        let m = self.matched.take().expect("message already received");
        let src = m.env.src;
        let id = with_engine(|e| e.mrecv(m, ptr, cap));
        Pending::new(id, Some(src), self.handle.members())
    }

    /// Receives the message as one value.
    pub fn matched_receive<Msg: Equivalence>(mut self) -> (Msg, Status) {
        let mut v = MaybeUninit::<Msg>::uninit();
        let (ptr, cap, unpack) = value_target(v.as_mut_ptr());
        let mut p = self.start(ptr, cap);
        p.unpack = unpack;
        let st = p.wait().or_fatal();
        if st.bytes == 0 {
            panic!("Received an empty message.");
        }
        whole_value::<Msg>(&st).or_fatal();
        // SAFETY: as in `recv_value`: a completed receive of exactly `Msg`'s data bytes into
        // `v`, every bit pattern of which is a valid `Msg`.
        (unsafe { v.assume_init() }, st)
    }

    /// Receives the message into `buf`.
    pub fn matched_receive_into<Buf: ?Sized + BufferMut>(mut self, buf: &mut Buf) -> Status {
        let (ptr, cap, unpack) = recv_target(buf);
        let mut p = self.start(ptr, cap);
        p.unpack = unpack;
        p.wait().or_fatal()
    }

    /// [`matched_receive_into`](Self::matched_receive_into), returning its error (a
    /// truncated message, a lost sender) instead of stopping the process.
    pub fn try_matched_receive_into<Buf: ?Sized + BufferMut>(mut self, buf: &mut Buf) -> Result<Status> {
        let (ptr, cap, unpack) = recv_target(buf);
        let mut p = self.start(ptr, cap);
        p.unpack = unpack;
        p.wait()
    }

    /// Starts receiving the message into `buf`.
    pub fn immediate_matched_receive_into<'a, Sc, Buf: ?Sized + 'a>(
        mut self,
        scope: Sc,
        buf: &'a mut Buf,
    ) -> Request<'a, Buf, Sc>
    where
        Buf: BufferMut,
        Sc: Scope<'a>,
    {
        Request::receive(buf, scope, |buf| {
            let (ptr, cap, unpack) = recv_target(buf);
            let mut p = self.start(ptr, cap);
            p.unpack = unpack;
            p
        })
    }

    fn try_matched_receive_vec_with<T: Equivalence>(mut self, st: Status) -> Result<(Vec<T>, Status)> {
        let map_size = T::equivalent_datatype().type_map().size();
        if map_size == 0 || st.bytes % map_size as u64 != 0 {
            let _ = self.start(std::ptr::null_mut(), 0); // consume it
            return Err(Error::Count { bytes: st.bytes, elem: map_size });
        }
        let n = (st.bytes / map_size as u64) as usize;
        let mut v: Vec<T> = Vec::with_capacity(n);
        // Into the spare capacity, through raw pointers only: it is not initialised.
        let (ptr, cap, unpack) = raw_target(v.as_mut_ptr().cast(), T::equivalent_datatype().type_map(), n);
        let mut p = self.start(ptr, cap);
        p.unpack = unpack;
        let got = p.wait()?;
        if got.bytes != st.bytes {
            return Err(Error::SizeMismatch { expected: st.bytes as usize, got: got.bytes });
        }
        // SAFETY: the capacity holds `n` elements (`n * size_of::<T>()` bytes, `n` extents of
        // `T`'s datatype), and the receive completed with `n * map_size` bytes: every data
        // byte of the `n` elements, written in place or unpacked; padding needs no value and
        // every bit pattern of the data is a valid `T` (`Equivalence`'s contract).
        unsafe { v.set_len(n) };
        Ok((v, got))
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if self.matched.is_some() && !std::thread::panicking() {
            panic!("matched message dropped without receiving.");
        }
    }
}

/// Receiving a matched message as a vector (on the pair returned by `matched_probe`).
pub trait MatchedReceiveVec {
    /// Receives the message as a vector.
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status);
}

impl MatchedReceiveVec for (Message, Status) {
    fn matched_receive_vec<Msg: Equivalence>(self) -> (Vec<Msg>, Status) {
        let (m, s) = self;
        m.try_matched_receive_vec_with(s).or_fatal()
    }
}

// ------------------------------------------------------------------ receive futures

/// A value being received by `immediate_receive`.
#[must_use]
pub struct ReceiveFuture<T> {
    /// A leaked `Box<MaybeUninit<T>>`, the receive's target: held as a raw pointer, not a
    /// `Box`, while the device may write into it; freed by `finish`, leaked if the future is
    /// dropped unfinished.
    val: Option<NonNull<MaybeUninit<T>>>,
    pending: Option<Pending>,
}

// SAFETY: a `ReceiveFuture` owns its allocation as a `Box<MaybeUninit<T>>` would (nothing else
// points to it but the pending receive) and its `Pending`, which is `Send`; moving it to
// another thread moves a `T` there, hence `T: Send`.
unsafe impl<T: Send> Send for ReceiveFuture<T> {}

impl<T: Equivalence> ReceiveFuture<T> {
    fn finish(&mut self, st: Status) -> (T, Status) {
        if st.bytes == 0 {
            panic!("Received an empty message into a ReceiveFuture.");
        }
        whole_value::<T>(&st).or_fatal();
        let v = self.val.take().expect("value");
        // SAFETY: `v` came from `Box::leak` in `immediate_receive_with_tag` and is given back
        // once: the receive into it completed (nothing writes into it any more) with exactly
        // `T`'s data bytes, every bit pattern of which is a valid `T` (see `recv_value`).
        let v = unsafe { Box::from_raw(v.as_ptr()).assume_init() };
        (*v, st)
    }

    /// Waits for the value.
    pub fn get(mut self) -> (T, Status) {
        let st = self.pending.take().expect("pending").wait().or_fatal();
        self.finish(st)
    }

    /// The value if it arrived, else the future back.
    #[allow(clippy::result_large_err, reason = "rsmpi's signature: the Err is the future handed back unfinished")]
    pub fn r#try(mut self) -> std::result::Result<(T, Status), Self> {
        match self.pending.take().expect("pending").test() {
            Ok(r) => {
                let st = r.or_fatal();
                Ok(self.finish(st))
            }
            Err(p) => {
                self.pending = Some(p);
                Err(self)
            }
        }
    }
}

impl<T> Drop for ReceiveFuture<T> {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            // The engine may still write into the value: its memory stays allocated (leaked).
            self.val = None;
            drop(p);
            if !std::thread::panicking() {
                panic!("request was dropped without being completed");
            }
        } else if let Some(v) = self.val.take() {
            // SAFETY: no receive is pending (it completed, a panic interrupted `finish`), so
            // nothing points into the allocation from `Box::leak` any more; it is freed as the
            // `MaybeUninit<T>` it is, without dropping a `T`.
            drop(unsafe { Box::from_raw(v.as_ptr()) });
        }
    }
}

// ------------------------------------------------------------------ send-receive

fn check_same<S: Source, D: Destination>(source: &S, destination: &D) {
    assert_eq!(source.as_communicator().compare(destination.as_communicator()), CommunicatorRelation::Identical);
}

/// Sends `msg` with `sendtag` and receives a value with `receivetag`.
pub fn send_receive_with_tags<M, D, R, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    check_same(source, destination);
    let mut v = MaybeUninit::<R>::uninit();
    let (ptr, cap, unpack) = value_target(v.as_mut_ptr());
    let h = Source::comm_handle(source);
    let mut recv = start_recv(h, h.p2p_id(), source.source_rank(), receivetag, ptr, cap).or_fatal();
    recv.unpack = unpack;
    let st = send_then_wait(msg, destination, sendtag, recv);
    whole_value::<R>(&st).or_fatal();
    // SAFETY: as in `recv_value`: a completed receive of exactly `R`'s data bytes into `v`,
    // every bit pattern of which is a valid `R`.
    (unsafe { v.assume_init() }, st)
}

/// Sends `msg` while the receive `recv` is posted, then waits for both.
fn send_then_wait<M: ?Sized + Buffer, D: Destination>(msg: &M, destination: &D, sendtag: Tag, recv: Pending) -> Status {
    let (ptr, len, keep) = send_bytes(msg);
    let dh = Destination::comm_handle(destination);
    let send =
        start_send(dh, dh.p2p_id(), destination.destination_rank(), sendtag, ptr, len, SendMode::Standard).or_fatal();
    send.wait().or_fatal();
    drop(keep);
    recv.wait().or_fatal()
}

/// Sends `msg` and receives a value (`send_receive::<R, _, _, _>`).
pub fn send_receive<R, M, D, S>(msg: &M, destination: &D, source: &S) -> (R, Status)
where
    M: Equivalence,
    D: Destination,
    R: Equivalence,
    S: Source,
{
    send_receive_with_tags(msg, destination, 0, source, ANY_TAG)
}

/// Sends `msg` with `sendtag` and receives into `buf` with `receivetag`.
pub fn send_receive_into_with_tags<M: ?Sized, D, B: ?Sized, S>(
    msg: &M,
    destination: &D,
    sendtag: Tag,
    buf: &mut B,
    source: &S,
    receivetag: Tag,
) -> Status
where
    M: Buffer,
    D: Destination,
    B: BufferMut,
    S: Source,
{
    check_same(source, destination);
    let h = Source::comm_handle(source);
    let recv = irecv_buf(h, source.source_rank(), receivetag, buf).or_fatal();
    send_then_wait(msg, destination, sendtag, recv)
}

/// Sends `msg` and receives into `buf`.
pub fn send_receive_into<M: ?Sized, D, B: ?Sized, S>(msg: &M, destination: &D, buf: &mut B, source: &S) -> Status
where
    M: Buffer,
    D: Destination,
    B: BufferMut,
    S: Source,
{
    send_receive_into_with_tags(msg, destination, 0, buf, source, ANY_TAG)
}

/// Sends the contents of `buf` and replaces them with the received message.
pub fn send_receive_replace_into_with_tags<B: ?Sized, D, S>(
    buf: &mut B,
    destination: &D,
    sendtag: Tag,
    source: &S,
    receivetag: Tag,
) -> Status
where
    B: BufferMut,
    D: Destination,
    S: Source,
{
    check_same(source, destination);
    // Pack the outgoing data first: the receive writes into the same memory.
    let dt = buf.as_datatype();
    let mut out = Vec::new();
    // SAFETY: `BufferMut`'s contract: `buf.pointer_mut()` is readable for `count()`
    // initialised elements of its datatype while `buf` is mutably borrowed.
    unsafe { dt.type_map().pack(buf.pointer_mut() as *const u8, buf.count().max(0) as usize, &mut out) };
    send_receive_into_with_tags(&out[..], destination, sendtag, buf, source, receivetag)
}

/// Sends the contents of `buf` and replaces them with the received message.
pub fn send_receive_replace_into<B: ?Sized, D, S>(buf: &mut B, destination: &D, source: &S) -> Status
where
    B: BufferMut,
    D: Destination,
    S: Source,
{
    send_receive_replace_into_with_tags(buf, destination, 0, source, ANY_TAG)
}

/// Re-exports for `use mpi::point_to_point::traits::*`.
pub mod traits {
    pub use super::{Destination, MatchedReceiveVec, Source};
}

impl From<Status> for crate::handles::MPI_Status {
    fn from(s: crate::point_to_point::Status) -> Self {
        crate::handles::MPI_Status {
            MPI_SOURCE: s.source,
            MPI_TAG: s.tag,
            MPI_ERROR: crate::handles::MPI_SUCCESS as std::os::raw::c_int,
            bytes: s.bytes,
            cancelled: s.cancelled as std::os::raw::c_int,
        }
    }
}
