//! How the engine's process coordinates with others beyond point-to-point messages: the
//! hooks the engine calls where a coordination may act (a send leaving, a receive posted,
//! matched or completed, a frame kind the engine does not know, a connection lost, a failure
//! declared, a write about to leave, …). A job without replicas runs [`Solo`], whose hooks are
//! empty and `#[inline(always)]`: once compiled they vanish, leaving no branch, no call and no
//! allocation on its path. The replication layer (above the engine) implements the trait with
//! its own state.

use super::{Core, Eager, Waits};
use crate::device::conn::{Conn, ConnError, ReqId, StatusInfo};
use crate::error::{Error, Result};
use p2pmpi_core::matching::{Envelope, Pattern};
use p2pmpi_wire::{Header, Mid};
use std::ops::Range;
use std::time::Duration;

/// The hooks of a coordination, each given the engine (`e.coord` is the coordination's own
/// state). Each hook's comment says what [`Solo`] does.
pub(crate) trait Coordination: Sized + Send {
    /// Whether the coordination adds nothing to a message (no frames of its own, no copies
    /// kept, every frame its sender's): then the engine's direct paths apply (a small eager
    /// frame taken straight from a ring, a single copy, the ring watched while spinning).
    const PLAIN: bool;

    /// Its state in words, for `P2PMPI_DEBUG` (Solo: nothing).
    fn describe<S: Waits>(e: &Core<Self, S>) -> String;
    /// The rank that slot `slot` runs (Solo: the slot).
    fn rank_of<S: Waits>(e: &Core<Self, S>, slot: i32) -> i32;
    /// Universe ids of processes per universe id (Solo: 1).
    fn per_id<S: Waits>(e: &Core<Self, S>) -> usize;
    /// The slots of the world, from its first to one past its last (Solo: its ranks).
    fn world_slots<S: Waits>(e: &Core<Self, S>) -> (i32, i32);
    /// The slots of universe ids `ids` (Solo: the ids).
    fn slots_of_ids<S: Waits>(e: &Core<Self, S>, ids: &[i32]) -> Vec<i32>;
    /// The universe has `n` ids (a spawn): how many slots it has (Solo: `n`).
    fn grow<S: Waits>(e: &mut Core<Self, S>, n: usize) -> usize;
    /// Whether slot `slot` is one the coordination counts on no more (Solo: never).
    fn cut<S: Waits>(e: &Core<Self, S>, slot: i32) -> bool;
    /// Why nothing may be sent to slot `dst` any more, if so (Solo: a peer lost).
    fn refused<S: Waits>(e: &Core<Self, S>, dst: i32) -> Option<Error>;
    /// How long a connection to a process outside the world is retried (Solo: the default).
    fn connect_retry<S: Waits>(e: &Core<Self, S>, outside: bool) -> Option<Duration>;
    /// Connecting to slot `slot` failed while the job starts (Solo: the error).
    fn start_failed<S: Waits>(e: &mut Core<Self, S>, slot: i32, err: Error) -> Result<()>;
    /// Deaths declared meanwhile, applied during start-up waits (Solo: nothing).
    fn apply_declared<S: Waits>(e: &mut Core<Self, S>);
    /// A frame is about to leave: fencing (Solo: nothing).
    fn before_write();
    /// Carries out what the coordination has to do (Solo: nothing).
    fn drive<S: Waits>(e: &mut Core<Self, S>);
    /// A deferred frame could not be sent to `peer` (Solo: communication ends).
    fn send_failed<S: Waits>(e: &mut Core<Self, S>, peer: i32, err: Error);
    /// The number of the operation being posted, if the coordination numbers them (Solo:
    /// none).
    fn next_op<S: Waits>(e: &mut Core<Self, S>) -> Option<u64>;
    /// Operation `op` is posted, failing with `err` here: the error it fails with (Solo:
    /// `err`).
    fn post_failure<S: Waits>(e: &mut Core<Self, S>, op: Option<u64>, err: Option<Error>) -> Option<Error>;
    /// Request `r` stands for operation `op` (Solo: nothing).
    fn number<S: Waits>(e: &mut Core<Self, S>, r: ReqId, op: Option<u64>);
    /// A send leaves: `Some` when the coordination carries it out (Solo: `None`, the engine
    /// does).
    fn send<S: Waits>(
        e: &mut Core<Self, S>,
        mid: Mid,
        ptr: *const u8,
        len: usize,
        sync: bool,
        op: Option<u64>,
    ) -> Option<ReqId>;
    /// Receive `r` is posted: whether the coordination posts it (Solo: no).
    fn receive<S: Waits>(e: &mut Core<Self, S>, r: ReqId, pat: Pattern) -> bool;
    /// Receive `r` matched the message of `env` (Solo: nothing).
    fn matched<S: Waits>(e: &mut Core<Self, S>, r: ReqId, env: &Envelope);
    /// A synchronous message was matched (Solo: none comes).
    fn matched_sync<S: Waits>(e: &mut Core<Self, S>, env: &Envelope);
    /// A synchronous message was queued unmatched (Solo: none comes).
    fn sync_unmatched<S: Waits>(e: &mut Core<Self, S>, env: &Envelope);
    /// A message queued unmatched was taken by a receive (Solo: nothing).
    fn consumed<S: Waits>(e: &mut Core<Self, S>, env: &Envelope);
    /// Eager message `env` (`data`) of another process is accepted whole here, matched or
    /// queued (Solo: nothing).
    fn accepted<S: Waits>(e: &mut Core<Self, S>, env: &Envelope, data: &[u8]);
    /// A message arrived again (Solo: nothing).
    fn duplicate<S: Waits>(e: &mut Core<Self, S>, env: &Envelope, sync: bool);
    /// A message arrived before an earlier one of its channel (Solo: dropped, with a warning).
    fn early<S: Waits>(e: &mut Core<Self, S>, env: Envelope, data: Vec<u8>, sync: bool);
    /// A message was accepted on channel (`comm`, `src`, `tag`): those kept aside that are
    /// next now are accepted (Solo: none are kept).
    fn drain_early<S: Waits>(e: &mut Core<Self, S>, comm: u32, src: i32, tag: i32);
    /// Rendez-vous message `mid` (`env`) matched receive `r`: whether the coordination asks
    /// for its data or has it (Solo: no).
    fn rndv_matched<S: Waits>(e: &mut Core<Self, S>, r: ReqId, env: &Envelope, mid: Mid) -> bool;
    /// Connection id `cid` now stands for a new connection (opened or accepted): what the
    /// coordination kept about the previous one is forgotten (Solo: nothing).
    fn conn_opened<S: Waits>(e: &mut Core<Self, S>, cid: usize);
    /// The large eager message that connection `cid` streamed into a buffer is whole: whether
    /// the coordination takes it (it streamed it so, then [`Self::stream_kept`] follows;
    /// Solo: never, the engine matches it).
    fn keeps_stream<S: Waits>(e: &mut Core<Self, S>, cid: usize) -> bool;
    /// A message the coordination streamed into a buffer of its own on connection `cid` is
    /// whole (Solo: none is streamed so).
    fn stream_kept<S: Waits>(e: &mut Core<Self, S>, cid: usize, env: Envelope, data: Vec<u8>);
    /// A stream on connection `cid` is over; `into`: the receive it completed, if it filled
    /// one (Solo: nothing).
    fn stream_done<S: Waits>(e: &mut Core<Self, S>, cid: usize, into: Option<ReqId>);
    /// The receive that connection `cid` streams into was withdrawn: its data is dropped
    /// (Solo: nothing).
    fn stream_cancelled<S: Waits>(e: &mut Core<Self, S>, cid: usize);
    /// Request `id` completes with `st`: whether it was a frame of the coordination's own
    /// (then the coordination took it; Solo: never).
    fn completing<S: Waits>(e: &mut Core<Self, S>, id: ReqId, st: &Result<StatusInfo>) -> bool;
    /// The program took request `id`'s outcome (Solo: nothing).
    fn taken<S: Waits>(e: &mut Core<Self, S>, id: ReqId, ok: bool);
    /// Request `id` is withdrawn: its buffer is about to go (Solo: nothing).
    fn detach<S: Waits>(e: &mut Core<Self, S>, id: ReqId);
    /// A frame from slot `slot` on connection `cid` (`conn`) after the opening: `Some` when
    /// the coordination takes it (Solo: never).
    fn frame<S: Waits>(
        e: &mut Core<Self, S>,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: Range<usize>,
        slot: i32,
        from_peer: bool,
    ) -> Option<std::result::Result<(), ConnError>>;
    /// The peer of a connection takes data (Solo: nothing).
    fn peer_takes_data<S: Waits>(e: &mut Core<Self, S>, peer: i32);
    /// The connection `cid` (`conn`) with slot `peer` broke (`cause`): whether the
    /// coordination takes it (Solo: no, the peer is lost).
    fn conn_lost<S: Waits>(e: &mut Core<Self, S>, cid: usize, conn: &mut Conn, peer: i32, cause: &str) -> bool;
    /// The launcher declared `id` dead: whether the coordination takes it (Solo: no).
    fn declared_dead<S: Waits>(e: &mut Core<Self, S>, id: i32) -> bool;
    /// Communicator context `ctx` was revoked (Solo: revoked here at once).
    fn revocation<S: Waits>(e: &mut Core<Self, S>, ctx: u32);
    /// The coordination's timers, with the stall limit `limit` (Solo: none).
    fn timers<S: Waits>(e: &mut Core<Self, S>, limit: Duration);
    /// A send to `peer` made no progress for `for_`: whether the coordination takes it (Solo:
    /// no, communication ends).
    fn stalled<S: Waits>(e: &mut Core<Self, S>, peer: i32, for_: Duration) -> bool;
    /// Whether the coordination has nothing left to send (Solo: yes).
    fn idle<S: Waits>(e: &Core<Self, S>) -> bool;
    /// The slots whose connections bring rank `h`'s data, and one more whose frames are
    /// awaited (Solo: `h`'s slot).
    fn hinted<S: Waits>(e: &Core<Self, S>, h: usize) -> (Range<usize>, Option<usize>);
    /// The schedules' posts are under way (`on`) or over (Solo: nothing).
    fn scheduling<S: Waits>(e: &mut Core<Self, S>, on: bool);
    /// Immediate collective `op` succeeded here: `Some(told)` when its request may complete
    /// (`told`: frames to flush), `None` not yet (Solo: at once).
    fn schedule_word<S: Waits>(e: &mut Core<Self, S>, op: u64) -> Option<bool>;
}

/// The coordination of a job without replicas: none. Every hook is empty or the engine's
/// plain behaviour, inlined away.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Solo;

impl Coordination for Solo {
    const PLAIN: bool = true;

    fn describe<S: Waits>(_: &Core<Self, S>) -> String {
        String::new()
    }
    #[inline(always)]
    fn rank_of<S: Waits>(_: &Core<Self, S>, slot: i32) -> i32 {
        slot
    }
    #[inline(always)]
    fn per_id<S: Waits>(_: &Core<Self, S>) -> usize {
        1
    }
    #[inline(always)]
    fn world_slots<S: Waits>(e: &Core<Self, S>) -> (i32, i32) {
        (e.base.world_base, e.base.world_base + e.base.world_size)
    }
    #[inline(always)]
    fn slots_of_ids<S: Waits>(_: &Core<Self, S>, ids: &[i32]) -> Vec<i32> {
        ids.to_vec()
    }
    #[inline(always)]
    fn grow<S: Waits>(_: &mut Core<Self, S>, n: usize) -> usize {
        n
    }
    #[inline(always)]
    fn cut<S: Waits>(_: &Core<Self, S>, _: i32) -> bool {
        false
    }
    #[inline(always)]
    fn refused<S: Waits>(e: &Core<Self, S>, dst: i32) -> Option<Error> {
        let cause = e.lost.get(&dst)?;
        Some(Error::PeerLost { rank: dst, cause: cause.clone() })
    }
    #[inline(always)]
    fn connect_retry<S: Waits>(_: &Core<Self, S>, _: bool) -> Option<Duration> {
        None
    }
    #[inline(always)]
    fn start_failed<S: Waits>(_: &mut Core<Self, S>, _: i32, err: Error) -> Result<()> {
        Err(err)
    }
    #[inline(always)]
    fn apply_declared<S: Waits>(_: &mut Core<Self, S>) {}
    #[inline(always)]
    fn before_write() {}
    #[inline(always)]
    fn drive<S: Waits>(_: &mut Core<Self, S>) {}
    #[inline(always)]
    fn send_failed<S: Waits>(e: &mut Core<Self, S>, _: i32, err: Error) {
        e.set_fatal(err);
    }
    #[inline(always)]
    fn next_op<S: Waits>(_: &mut Core<Self, S>) -> Option<u64> {
        None
    }
    #[inline(always)]
    fn post_failure<S: Waits>(_: &mut Core<Self, S>, _: Option<u64>, err: Option<Error>) -> Option<Error> {
        err
    }
    #[inline(always)]
    fn number<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: Option<u64>) {}
    #[inline(always)]
    fn send<S: Waits>(_: &mut Core<Self, S>, _: Mid, _: *const u8, _: usize, _: bool, _: Option<u64>) -> Option<ReqId> {
        None
    }
    #[inline(always)]
    fn receive<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: Pattern) -> bool {
        false
    }
    #[inline(always)]
    fn matched<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: &Envelope) {}
    #[inline(always)]
    fn matched_sync<S: Waits>(_: &mut Core<Self, S>, _: &Envelope) {}
    #[inline(always)]
    fn sync_unmatched<S: Waits>(_: &mut Core<Self, S>, _: &Envelope) {}
    #[inline(always)]
    fn consumed<S: Waits>(_: &mut Core<Self, S>, _: &Envelope) {}
    #[inline(always)]
    fn accepted<S: Waits>(_: &mut Core<Self, S>, _: &Envelope, _: &[u8]) {}
    #[inline(always)]
    fn duplicate<S: Waits>(_: &mut Core<Self, S>, _: &Envelope, _: bool) {}
    fn early<S: Waits>(e: &mut Core<Self, S>, env: Envelope, data: Vec<u8>, _: bool) {
        crate::pool::give(data);
        super::log_warn(e.base.rank, &format!("message {env:?} arrived out of order; dropped"));
    }
    #[inline(always)]
    fn drain_early<S: Waits>(_: &mut Core<Self, S>, _: u32, _: i32, _: i32) {}
    #[inline(always)]
    fn rndv_matched<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: &Envelope, _: Mid) -> bool {
        false
    }
    #[inline(always)]
    fn conn_opened<S: Waits>(_: &mut Core<Self, S>, _: usize) {}
    #[inline(always)]
    fn keeps_stream<S: Waits>(_: &mut Core<Self, S>, _: usize) -> bool {
        false
    }
    fn stream_kept<S: Waits>(e: &mut Core<Self, S>, _: usize, env: Envelope, data: Vec<u8>) {
        e.accept_eager(env, Eager::Owned(data), false);
    }
    #[inline(always)]
    fn stream_done<S: Waits>(_: &mut Core<Self, S>, _: usize, _: Option<ReqId>) {}
    #[inline(always)]
    fn stream_cancelled<S: Waits>(_: &mut Core<Self, S>, _: usize) {}
    #[inline(always)]
    fn completing<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: &Result<StatusInfo>) -> bool {
        false
    }
    #[inline(always)]
    fn taken<S: Waits>(_: &mut Core<Self, S>, _: ReqId, _: bool) {}
    #[inline(always)]
    fn detach<S: Waits>(_: &mut Core<Self, S>, _: ReqId) {}
    #[inline(always)]
    fn frame<S: Waits>(
        _: &mut Core<Self, S>,
        _: usize,
        _: &mut Conn,
        _: Header,
        _: Range<usize>,
        _: i32,
        _: bool,
    ) -> Option<std::result::Result<(), ConnError>> {
        None
    }
    #[inline(always)]
    fn peer_takes_data<S: Waits>(_: &mut Core<Self, S>, _: i32) {}
    #[inline(always)]
    fn conn_lost<S: Waits>(_: &mut Core<Self, S>, _: usize, _: &mut Conn, _: i32, _: &str) -> bool {
        false
    }
    #[inline(always)]
    fn declared_dead<S: Waits>(_: &mut Core<Self, S>, _: i32) -> bool {
        false
    }
    #[inline(always)]
    fn revocation<S: Waits>(e: &mut Core<Self, S>, ctx: u32) {
        e.revoke(ctx);
    }
    #[inline(always)]
    fn timers<S: Waits>(_: &mut Core<Self, S>, _: Duration) {}
    #[inline(always)]
    fn stalled<S: Waits>(_: &mut Core<Self, S>, _: i32, _: Duration) -> bool {
        false
    }
    #[inline(always)]
    fn idle<S: Waits>(_: &Core<Self, S>) -> bool {
        true
    }
    #[inline(always)]
    fn hinted<S: Waits>(_: &Core<Self, S>, h: usize) -> (Range<usize>, Option<usize>) {
        (h..h + 1, None)
    }
    #[inline(always)]
    fn scheduling<S: Waits>(_: &mut Core<Self, S>, _: bool) {}
    #[inline(always)]
    fn schedule_word<S: Waits>(_: &mut Core<Self, S>, _: u64) -> Option<bool> {
        Some(false)
    }
}
