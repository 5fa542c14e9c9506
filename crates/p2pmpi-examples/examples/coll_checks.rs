//! Correctness checks of the collectives, communicators and groups, written in rsmpi's style.
//!
//! `coll_checks SEED [ROUNDS]`: every rank derives every rank's inputs from (SEED, round, rank)
//! with splitmix64, computes the sequential reference of each collective locally and asserts
//! that its own result equals it. Each round picks a length class (empty, small, or above the
//! eager limit; the three classes are spread over consecutive rounds), roots, counts and
//! displacements, and runs on the world:
//! broadcast, gather(v), scatter(v), allgather(v), alltoall(v), reduce, allreduce,
//! reduce_scatter_block, scan, exclusive scan, reduce_local and barrier, with the system
//! operations (including MAXLOC/MINLOC), a commutative user operation and a non-commutative
//! one (composition of affine maps, which depends on rank order); then communicators made by
//! duplicate, split_by_color(_with_key), split_by_subgroup(_collective) and split_shared, with
//! collectives on them interleaved with point-to-point traffic on the world using the same
//! tags; then groups. Every rank prints `coll_checks rank <r> hierarchical <k>` (k: how many
//! collectives it ran in phases per host), then rank 0 prints
//! `OK coll_checks n=<size> seed=<SEED> rounds=<R>`.
//!
//! Wrong results are reported on standard error (collective, communicator, root, datatype and
//! operation, round, length, first differing element) and the job goes on, to fail at the end;
//! `COLL_CHECKS_TRACE=1` says what each rank starts (to locate a hang).
//!
//! Targeted cases: `coll_checks gaps` (all_gather_varcount_into leaves the gaps between parts
//! alone), `coll_checks zero-parts gather|all_gather|all_to_all` (a zero-count part may share
//! its displacement with another part), and `coll_checks mismatch
//! all_gather|broadcast|broadcast_larger_root|all_reduce` (ranks call a collective with
//! buffers of different sizes: the job must fail with a clear message, not hang).
#![forbid(unsafe_code)]
use mpi::collective::{SystemOperation, UserOperation};
use mpi::datatype::{DynBuffer, DynBufferMut, Partition, PartitionMut};
use mpi::topology::{Color, CommunicatorRelation, GroupRelation, SimpleCommunicator, SystemGroup};
use mpi::traits::*;
use mpi::Count;
use std::fmt::Debug;

// ------------------------------------------------------------------------ element types

/// A (value, index) pair for MAXLOC / MINLOC; not contiguous (4 bytes of padding).
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
struct ValIdx {
    v: f64,
    i: i32,
}

/// An integer (value, index) pair: one homogeneous block of two `i32`.
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Eq, Default)]
struct IntLoc {
    v: i32,
    i: i32,
}

/// The affine map x ↦ a·x + b (mod 2^64). Composition is associative, not commutative.
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Affine {
    a: u64,
    b: u64,
}

/// `first`, then `then`: x ↦ then.a·(first.a·x + first.b) + then.b.
fn compose(first: &Affine, then: &Affine) -> Affine {
    Affine { a: then.a.wrapping_mul(first.a), b: then.a.wrapping_mul(first.b).wrapping_add(then.b) }
}

/// The non-commutative user operation: inout = in ∘ inout, `in` (lower ranks) applied first.
fn affine_op() -> UserOperation<'static> {
    UserOperation::associative(|x: DynBuffer, y: DynBufferMut| {
        let x = x.downcast::<Affine>().expect("the affine operation receives Affine elements");
        let y = y.downcast::<Affine>().expect("the affine operation receives Affine elements");
        assert_eq!(x.len(), y.len(), "user operation called with buffers of different lengths");
        for (a, b) in x.iter().zip(y.iter_mut()) {
            *b = compose(a, b);
        }
    })
}

/// A commutative user operation: wrapping addition of `u64`.
fn wrapping_add_op() -> UserOperation<'static> {
    UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
        let x = x.downcast::<u64>().expect("the addition receives u64 elements");
        let y = y.downcast::<u64>().expect("the addition receives u64 elements");
        assert_eq!(x.len(), y.len(), "user operation called with buffers of different lengths");
        for (a, b) in x.iter().zip(y.iter_mut()) {
            *b = a.wrapping_add(*b);
        }
    })
}

fn maxloc_ref(a: &ValIdx, b: &ValIdx) -> ValIdx {
    if a.v > b.v || (a.v == b.v && a.i < b.i) {
        *a
    } else {
        *b
    }
}

fn minloc_ref(a: &ValIdx, b: &ValIdx) -> ValIdx {
    if a.v < b.v || (a.v == b.v && a.i < b.i) {
        *a
    } else {
        *b
    }
}

fn int_maxloc_ref(a: &IntLoc, b: &IntLoc) -> IntLoc {
    if a.v > b.v || (a.v == b.v && a.i < b.i) {
        *a
    } else {
        *b
    }
}

fn int_minloc_ref(a: &IntLoc, b: &IntLoc) -> IntLoc {
    if a.v < b.v || (a.v == b.v && a.i < b.i) {
        *a
    } else {
        *b
    }
}

// ------------------------------------------------------------------------ randomness

static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn new(parts: &[u64]) -> Rng {
        Rng(parts.iter().fold(0x5EED_0FC0_11EC_7100, |s, &p| mix(s ^ p)))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 if n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo) as u64) as usize
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

// ------------------------------------------------------------------------ context

/// What every check needs: the world, the round's parameters, and how to fail.
#[derive(Clone, Copy)]
struct Ctx<'w> {
    world: &'w SimpleCommunicator,
    failures: &'w std::cell::Cell<usize>,
    seed: u64,
    round: u64,
    n: usize,
    me: usize,
    len: usize,
}

/// A communicator under test with its expected membership (world ranks in communicator order).
struct Comm<'a> {
    comm: &'a SimpleCommunicator,
    members: Vec<usize>,
    name: String,
}

impl Comm<'_> {
    fn size(&self) -> usize {
        self.members.len()
    }
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }
}

impl Ctx<'_> {
    /// The same round with `len` cut to a few thousand elements when it is large: for the
    /// checks whose large case adds little (the same code paths as another, large, check) but
    /// whose sequential references would cost much in a debug build with 9 processes.
    fn medium(&self) -> Ctx<'_> {
        Ctx { len: if self.len > 4000 { self.len / 16 } else { self.len }, ..*self }
    }

    /// A random stream every rank can reproduce.
    fn rng(&self, what: &str, a: usize, b: usize) -> Rng {
        Rng::new(&[self.seed, self.round, fnv(what), a as u64, b as u64])
    }

    /// `len` values of stream (`what`, `a`, `b`).
    fn data<T>(&self, what: &str, a: usize, b: usize, len: usize, gen: &dyn Fn(&mut Rng) -> T) -> Vec<T> {
        let mut r = self.rng(what, a, b);
        (0..len).map(|_| gen(&mut r)).collect()
    }

    /// With `COLL_CHECKS_TRACE` set, says on standard error what comes next (to find a hang).
    fn step(&self, what: &str) {
        if std::env::var_os("COLL_CHECKS_TRACE").is_some() {
            eprintln!(
                "[{:?} rank {} round {} len {}] {what}",
                START.get_or_init(std::time::Instant::now).elapsed(),
                self.me,
                self.round,
                self.len
            );
        }
    }

    /// Reports a wrong result and goes on (the job fails at the end, with every wrong result
    /// reported).
    fn fail(&self, what: &str, detail: String) {
        self.failures.set(self.failures.get() + 1);
        eprintln!(
            "coll_checks FAILED on rank {}: {what} [n={} seed={} round={} len={}]: {detail}",
            self.me, self.n, self.seed, self.round, self.len
        );
    }

    /// Reports a failure after which the checks cannot go on (wrong membership) and stops the job.
    fn fatal(&self, what: &str, detail: String) -> ! {
        self.fail(what, detail);
        self.world.abort(3)
    }

    fn check<T: PartialEq + Debug>(&self, what: &str, got: &[T], want: &[T]) {
        if got.len() != want.len() {
            self.fail(what, format!("result has {} elements, expected {}", got.len(), want.len()));
            return;
        }
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let bad = (0..got.len()).filter(|&i| got[i] != want[i]).count();
            self.fail(
                what,
                format!(
                    "element {i} of {} (and {} other elements) differs: expected {:?}, got {:?}",
                    got.len(),
                    bad - 1,
                    want[i],
                    got[i]
                ),
            );
        }
    }

    fn check_that(&self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        if !ok {
            self.fail(what, detail());
        }
    }

    /// Like `check_that`, for what the following checks depend on.
    fn require(&self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        if !ok {
            self.fatal(what, detail());
        }
    }

    /// Random counts (zeros included) for `parts` parts, the same on every rank.
    fn counts(&self, what: &str, parts: usize) -> Vec<usize> {
        let mut r = self.rng(what, 0, 0);
        (0..parts).map(|_| if self.len == 0 || r.below(4) == 0 { 0 } else { r.range(1, self.len + 1) }).collect()
    }

    /// Displacements of `counts` placed in `order`, with random gaps; returns (displs, total).
    fn displs(&self, what: &str, who: usize, counts: &[usize], order: &[usize]) -> (Vec<Count>, usize) {
        let mut r = self.rng(what, who, 1);
        let mut d = vec![0 as Count; counts.len()];
        let mut pos = 0;
        for &i in order {
            pos += r.below(3) as usize;
            d[i] = pos as Count;
            pos += counts[i];
        }
        (d, pos + r.below(3) as usize)
    }
}

fn as_counts(v: &[usize]) -> Vec<Count> {
    v.iter().map(|&c| c as Count).collect()
}

fn gen_i64(r: &mut Rng) -> i64 {
    r.next() as i64
}

// ------------------------------------------------------------------------ main

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    // A panic (an assertion of a user operation, say) must end the job at once: unwinding
    // would finalize while the other ranks wait in a collective.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));
    match args.get(1).map(String::as_str) {
        Some("mismatch") => {
            mismatch(&world, args.get(2).map_or("all_gather", String::as_str));
            return;
        }
        Some("gaps") => {
            gaps(&world);
            return;
        }
        Some("zero-parts") => {
            zero_parts(&world, args.get(2).map_or("all_to_all", String::as_str));
            return;
        }
        _ => {}
    }
    let seed: u64 = args.get(1).map_or(1, |s| s.parse().expect("SEED must be an integer"));
    let rounds: u64 = args.get(2).map_or(3, |s| s.parse().expect("ROUNDS must be an integer"));
    let (n, me) = (world.size() as usize, world.rank() as usize);
    // The length classes of consecutive rounds are a seed-dependent permutation of
    // (empty, small, large), so three rounds cover all three.
    let failures = std::cell::Cell::new(0usize);
    let mut classes = [0, 1, 2];
    Rng::new(&[seed, 0xC1A55]).shuffle(&mut classes);
    for round in 0..rounds {
        let mut r = Rng::new(&[seed, round, 0x1E46]);
        let len = match classes[(round % 3) as usize] {
            0 => 0,
            1 => r.range(1, 40),
            // Above the eager limit: at least 16500 × 8 bytes > 128 KiB.
            _ => r.range(16_500, 20_000),
        };
        let c = Ctx { world: &world, failures: &failures, seed, round, n, me, len };
        world_collectives(&c);
        world.barrier();
        communicators(&c);
        world.barrier();
        groups(&c);
        world.barrier();
    }
    let mine = failures.get() as u64;
    let mut total = 0u64;
    world.all_reduce_into(&mine, &mut total, SystemOperation::sum());
    if total > 0 || mine > 0 {
        eprintln!("coll_checks: rank {me}: {mine} failed checks ({total} on all ranks), seed {seed}");
        world.abort(3);
    }
    // How many collectives ran in phases per host (p2pmpi only; tests check the path taken).
    println!("coll_checks rank {me} hierarchical {}", mpi::collective::hierarchical_collectives());
    if me == 0 {
        println!("OK coll_checks n={n} seed={seed} rounds={rounds}");
    }
}

// ------------------------------------------------------------------------ world collectives

fn world_collectives(c: &Ctx) {
    let world = c.world;
    let (n, me) = (c.n, c.me);
    let w = Comm { comm: world, members: (0..n).collect(), name: "world".into() };
    let next = world.process_at_rank(((me + 1) % n) as i32);
    let prev = world.process_at_rank(((me + n - 1) % n) as i32);
    // Point-to-point messages on the world with the tags the collectives use internally,
    // pending while the collectives run: they must not be confused with collective traffic.
    let ring = |from: usize, tag: i32, len: usize| c.data("p2p-world", from, tag as usize, len, &gen_i64);
    let outgoing: Vec<Vec<i64>> = (0..=10).map(|t| ring(me, t, if t == 0 { c.len } else { 1 + t as usize })).collect();
    mpi::request::scope(|scope| {
        let sends: Vec<_> =
            outgoing.iter().enumerate().map(|(t, m)| next.immediate_send_with_tag(scope, &m[..], t as i32)).collect();

        let mut roots = c.rng("roots", 0, 0);
        let mut root = || roots.below(n as u64) as usize;
        bcast(c, &w, root());
        bcast_noncontiguous(c, root());
        gather(c, &w, root());
        gatherv(c, &w, root());
        scatter(c, &w, root());
        scatterv(c, &w, root());
        allgather(c, &w);
        allgatherv(c, &w);
        alltoall(c, &w);
        alltoallv(c, &w);
        barrier(c, root());
        let r3 = [root(), root(), root()];
        reductions_world(c, &w, &r3);
        reduce_scatter_blocks(c, &w);
        reduce_local(c);
        world.barrier();

        // Receive the point-to-point messages, highest tag first.
        for t in (0..=10).rev() {
            let (got, st) = prev.receive_vec_with_tag::<i64>(t);
            c.check_that(
                "point-to-point status during collectives",
                st.tag() == t && st.source_rank() == prev.rank(),
                || format!("status tag {} source {}", st.tag(), st.source_rank()),
            );
            let want = ring((me + n - 1) % n, t, if t == 0 { c.len } else { 1 + t as usize });
            c.check(&format!("point-to-point message with tag {t} sent across world collectives"), &got, &want);
        }
        for s in sends {
            s.wait();
        }
    });
}

/// No process leaves the barrier before the last one entered it: `late` sleeps, then enters;
/// everyone compares the time it left with the time `late` entered (one host, one clock).
fn barrier(c: &Ctx, late: usize) {
    c.step("barrier");
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut entered = 0u64;
    if c.me == late && c.round == 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if c.me == late {
        entered = now();
    }
    c.world.barrier();
    let left = now();
    c.world.process_at_rank(late as i32).broadcast_into(&mut entered);
    c.check_that(&format!("barrier (rank {late} entered last)"), left >= entered, || {
        format!("left the barrier {} ns before rank {late} entered it", entered - left)
    });
}

fn bcast(c: &Ctx, w: &Comm, root: usize) {
    let what = format!("broadcast_into on {} (root {root}, i64)", w.name);
    c.step(&what);
    let want = c.data("bcast", w.members[root], 0, c.len, &gen_i64);
    let mut buf = if w.rank() == root { want.clone() } else { vec![-7i64; c.len] };
    w.comm.process_at_rank(root as i32).broadcast_into(&mut buf[..]);
    c.check(&what, &buf, &want);
}

/// Broadcast of a non-contiguous derived datatype (packed on the way).
fn bcast_noncontiguous(c: &Ctx, root: usize) {
    let what = format!("broadcast_into on world (root {root}, ValIdx: non-contiguous derived datatype)");
    c.step(&what);
    let want = c.data("bcast-validx", root, 0, c.len, &|r| ValIdx { v: r.next() as f64, i: r.next() as i32 });
    let mut buf = if c.me == root { want.clone() } else { vec![ValIdx { v: -1.0, i: -1 }; c.len] };
    c.world.process_at_rank(root as i32).broadcast_into(&mut buf[..]);
    c.check(&what, &buf, &want);
}

fn gather(c: &Ctx, w: &Comm, root: usize) {
    let what = format!("gather_into(_root) on {} (root {root}, i64)", w.name);
    c.step(&what);
    let mine = c.data("gather", w.members[w.rank()], 0, c.len, &gen_i64);
    let p = w.comm.process_at_rank(root as i32);
    if w.rank() == root {
        let mut all = vec![-7i64; c.len * w.size()];
        p.gather_into_root(&mine[..], &mut all[..]);
        let want: Vec<i64> = w.members.iter().flat_map(|&m| c.data("gather", m, 0, c.len, &gen_i64)).collect();
        c.check(&what, &all, &want);
    } else {
        p.gather_into(&mine[..]);
    }
}

fn gatherv(c: &Ctx, w: &Comm, root: usize) {
    let what = format!("gather_varcount_into(_root) on {} (root {root}, i64)", w.name);
    c.step(&what);
    let counts = c.counts("gatherv-counts", w.size());
    let mine = c.data("gatherv", w.members[w.rank()], 0, counts[w.rank()], &gen_i64);
    let p = w.comm.process_at_rank(root as i32);
    if w.rank() == root {
        let order: Vec<usize> = (0..w.size()).collect();
        let (displs, total) = c.displs("gatherv-displs", 0, &counts, &order);
        let sentinel = -1_000_000 - c.me as i64;
        let mut all = vec![sentinel; total];
        {
            let mut part = PartitionMut::new(&mut all[..], as_counts(&counts), &displs[..]);
            p.gather_varcount_into_root(&mine[..], &mut part);
        }
        let mut want = vec![sentinel; total];
        for (i, &m) in w.members.iter().enumerate() {
            let d = displs[i] as usize;
            want[d..d + counts[i]].copy_from_slice(&c.data("gatherv", m, 0, counts[i], &gen_i64));
        }
        c.check(&format!("{what}, counts {counts:?}, displs {displs:?}"), &all, &want);
    } else {
        p.gather_varcount_into(&mine[..]);
    }
}

fn scatter(c: &Ctx, w: &Comm, root: usize) {
    let what = format!("scatter_into(_root) on {} (root {root}, i64)", w.name);
    c.step(&what);
    let n = w.size();
    let src = |rank: usize| c.data("scatter", w.members[root], rank, c.len, &gen_i64);
    let mut mine = vec![-7i64; c.len];
    let p = w.comm.process_at_rank(root as i32);
    if w.rank() == root {
        let all: Vec<i64> = (0..n).flat_map(src).collect();
        p.scatter_into_root(&all[..], &mut mine[..]);
    } else {
        p.scatter_into(&mut mine[..]);
    }
    c.check(&what, &mine, &src(w.rank()));
}

fn scatterv(c: &Ctx, w: &Comm, root: usize) {
    let what = format!("scatter_varcount_into(_root) on {} (root {root}, i64)", w.name);
    c.step(&what);
    let counts = c.counts("scatterv-counts", w.size());
    let order: Vec<usize> = (0..w.size()).collect();
    let (displs, total) = c.displs("scatterv-displs", 0, &counts, &order);
    let all = c.data("scatterv", w.members[root], 0, total, &gen_i64);
    let me = w.rank();
    let mut mine = vec![-7i64; counts[me]];
    let p = w.comm.process_at_rank(root as i32);
    if me == root {
        let part = Partition::new(&all[..], as_counts(&counts), &displs[..]);
        p.scatter_varcount_into_root(&part, &mut mine[..]);
    } else {
        p.scatter_varcount_into(&mut mine[..]);
    }
    let d = displs[me] as usize;
    c.check(&format!("{what}, counts {counts:?}, displs {displs:?}"), &mine, &all[d..d + counts[me]]);
}

fn allgather(c: &Ctx, w: &Comm) {
    let what = format!("all_gather_into on {} (i64)", w.name);
    c.step(&what);
    let mine = c.data("allgather", w.members[w.rank()], 0, c.len, &gen_i64);
    let mut all = vec![-7i64; c.len * w.size()];
    w.comm.all_gather_into(&mine[..], &mut all[..]);
    let want: Vec<i64> = w.members.iter().flat_map(|&m| c.data("allgather", m, 0, c.len, &gen_i64)).collect();
    c.check(&what, &all, &want);
}

fn allgatherv(c: &Ctx, w: &Comm) {
    let what = format!("all_gather_varcount_into on {} (i64)", w.name);
    c.step(&what);
    let counts = c.counts("allgatherv-counts", w.size());
    let order: Vec<usize> = (0..w.size()).collect();
    let (displs, total) = c.displs("allgatherv-displs", 0, &counts, &order);
    let mine = c.data("allgatherv", w.members[w.rank()], 0, counts[w.rank()], &gen_i64);
    // Rank-specific content outside the parts: it must be left alone.
    let sentinel = -1_000_000 - c.me as i64;
    let mut all = vec![sentinel; total];
    {
        let mut part = PartitionMut::new(&mut all[..], as_counts(&counts), &displs[..]);
        w.comm.all_gather_varcount_into(&mine[..], &mut part);
    }
    let mut want = vec![sentinel; total];
    for (i, &m) in w.members.iter().enumerate() {
        let d = displs[i] as usize;
        want[d..d + counts[i]].copy_from_slice(&c.data("allgatherv", m, 0, counts[i], &gen_i64));
    }
    c.check(&format!("{what}, counts {counts:?}, displs {displs:?}"), &all, &want);
}

fn alltoall(c: &Ctx, w: &Comm) {
    let what = format!("all_to_all_into on {} (i64)", w.name);
    c.step(&what);
    let me = w.rank();
    let block = |from: usize, to: usize| c.data("alltoall", w.members[from], w.members[to], c.len, &gen_i64);
    let send: Vec<i64> = (0..w.size()).flat_map(|j| block(me, j)).collect();
    let mut recv = vec![-7i64; send.len()];
    w.comm.all_to_all_into(&send[..], &mut recv[..]);
    let want: Vec<i64> = (0..w.size()).flat_map(|i| block(i, me)).collect();
    c.check(&what, &recv, &want);
}

fn alltoallv(c: &Ctx, w: &Comm) {
    let what = format!("all_to_all_varcount_into on {} (i64)", w.name);
    c.step(&what);
    let n = w.size();
    let me = w.rank();
    // count(i, j): elements comm rank i sends to comm rank j (zeros included).
    let count = |i: usize, j: usize| {
        let mut r = c.rng("alltoallv-count", w.members[i], w.members[j]);
        if c.len == 0 || r.below(4) == 0 {
            0
        } else {
            r.range(1, c.len + 1)
        }
    };
    let block = |i: usize, j: usize| c.data("alltoallv", w.members[i], w.members[j], count(i, j), &gen_i64);
    // Parts in a random order in both buffers (MPI allows any non-overlapping placement).
    let mut sorder: Vec<usize> = (0..n).collect();
    c.rng("alltoallv-sorder", w.members[me], 0).shuffle(&mut sorder);
    let mut rorder: Vec<usize> = (0..n).collect();
    c.rng("alltoallv-rorder", w.members[me], 0).shuffle(&mut rorder);
    let scounts: Vec<usize> = (0..n).map(|j| count(me, j)).collect();
    let rcounts: Vec<usize> = (0..n).map(|i| count(i, me)).collect();
    let (sdispls, stotal) = c.displs("alltoallv-sdispls", w.members[me], &scounts, &sorder);
    let (rdispls, rtotal) = c.displs("alltoallv-rdispls", w.members[me], &rcounts, &rorder);
    c.step(&format!(
        "{what}: send counts {scounts:?} displs {sdispls:?}, receive counts {rcounts:?} displs {rdispls:?}"
    ));
    let mut send = vec![-3i64; stotal];
    for j in 0..n {
        let d = sdispls[j] as usize;
        send[d..d + scounts[j]].copy_from_slice(&block(me, j));
    }
    let sentinel = -1_000_000 - c.me as i64;
    let mut recv = vec![sentinel; rtotal];
    {
        let sp = Partition::new(&send[..], as_counts(&scounts), &sdispls[..]);
        let mut rp = PartitionMut::new(&mut recv[..], as_counts(&rcounts), &rdispls[..]);
        w.comm.all_to_all_varcount_into(&sp, &mut rp);
    }
    let mut want = vec![sentinel; rtotal];
    for i in 0..n {
        let d = rdispls[i] as usize;
        want[d..d + rcounts[i]].copy_from_slice(&block(i, me));
    }
    c.check(&format!("{what}, receive counts {rcounts:?}, displs {rdispls:?}"), &recv, &want);
}

// ------------------------------------------------------------------------ reductions

/// One reduction case: the inputs of every member of `w` from `gen`, the reference combination
/// `f(in, inout)` (in = lower ranks), checked for reduce at each of `roots`, all_reduce, scan
/// and exclusive_scan (rank 0's buffer untouched).
#[allow(clippy::too_many_arguments)]
fn reduction<T, O>(
    c: &Ctx,
    w: &Comm,
    name: &str,
    gen: &dyn Fn(&mut Rng) -> T,
    f: &dyn Fn(&T, &T) -> T,
    op: O,
    roots: &[usize],
    sentinel: T,
) where
    T: Equivalence + Copy + PartialEq + Debug,
    O: Operation + Copy,
{
    reduction_parts(c, w, name, gen, f, op, roots, sentinel, true, true);
}

/// Like [`reduction`], with the reduce/all_reduce part (`reduces`) and the scan part (`scans`)
/// selectable.
#[allow(clippy::too_many_arguments)]
fn reduction_parts<T, O>(
    c: &Ctx,
    w: &Comm,
    name: &str,
    gen: &dyn Fn(&mut Rng) -> T,
    f: &dyn Fn(&T, &T) -> T,
    op: O,
    roots: &[usize],
    sentinel: T,
    reduces: bool,
    scans: bool,
) where
    T: Equivalence + Copy + PartialEq + Debug,
    O: Operation + Copy,
{
    c.step(&format!("reductions on {} ({name})", w.name));
    let me = w.rank();
    let input = |i: usize| c.data(name, w.members[i], 0, c.len, gen);
    let mine = input(me);
    // Fold in rank order: prefix up to me - 1, up to me, and over everyone.
    let (mut before, mut upto) = (None, None);
    let mut acc: Vec<T> = Vec::new();
    for i in 0..w.size() {
        let x = if i == me { mine.clone() } else { input(i) };
        acc = if i == 0 { x } else { acc.iter().zip(&x).map(|(a, b)| f(a, b)).collect() };
        if i + 1 == me {
            before = Some(acc.clone());
        }
        if i == me {
            upto = Some(acc.clone());
        }
    }
    let total = acc;
    let upto = upto.unwrap();

    for &root in roots.iter().filter(|_| reduces) {
        let p = w.comm.process_at_rank(root as i32);
        if me == root {
            let mut out = vec![sentinel; c.len];
            p.reduce_into_root(&mine[..], &mut out[..], op);
            c.check(&format!("reduce_into_root on {} (root {root}, {name})", w.name), &out, &total);
        } else {
            p.reduce_into(&mine[..], op);
        }
    }
    if reduces {
        let mut out = vec![sentinel; c.len];
        w.comm.all_reduce_into(&mine[..], &mut out[..], op);
        c.check(&format!("all_reduce_into on {} ({name})", w.name), &out, &total);
    }
    if !scans {
        return;
    }

    let mut out = vec![sentinel; c.len];
    w.comm.scan_into(&mine[..], &mut out[..], op);
    c.check(&format!("scan_into on {} ({name})", w.name), &out, &upto);

    let mut out = vec![sentinel; c.len];
    w.comm.exclusive_scan_into(&mine[..], &mut out[..], op);
    match before {
        Some(want) => c.check(&format!("exclusive_scan_into on {} ({name})", w.name), &out, &want),
        None => c.check(
            &format!("exclusive_scan_into on {} ({name}): rank 0's buffer must be untouched", w.name),
            &out,
            &vec![sentinel; c.len],
        ),
    }
}

fn gen_affine(r: &mut Rng) -> Affine {
    Affine { a: r.next() | 1, b: r.next() }
}

/// The reductions on the world: every system operation on its datatypes, MAXLOC/MINLOC, and
/// user operations (commutative, and non-commutative at several roots).
fn reductions_world(c: &Ctx, w: &Comm, roots: &[usize; 3]) {
    reductions_sums_and_extrema(c, w, roots);
    reductions_logical_and_bitwise(c, w, roots);
    reductions_loc(c, w, roots);
    reductions_user_ops(c, w, roots);
}

/// Sums, products, max and min on integers and floats.
fn reductions_sums_and_extrema(c: &Ctx, w: &Comm, roots: &[usize; 3]) {
    let m = c.medium();
    let one = &roots[..1];
    // Sums and products, exact: wrapping integers, integer-valued or power-of-two floats.
    reduction(c, w, "sum i64", &gen_i64, &|a, b| a.wrapping_add(*b), SystemOperation::sum(), one, 7);
    reduction(&m, w, "product i64", &gen_i64, &|a, b| a.wrapping_mul(*b), SystemOperation::product(), one, 7);
    reduction(&m, w, "sum u32", &|r| r.next() as u32, &|a, b| a.wrapping_add(*b), SystemOperation::sum(), one, 7);
    reduction(
        &m,
        w,
        "product u32",
        &|r| r.next() as u32,
        &|a, b| a.wrapping_mul(*b),
        SystemOperation::product(),
        one,
        7,
    );
    reduction(&m, w, "sum f64", &|r| r.below(2001) as f64 - 1000.0, &|a, b| a + b, SystemOperation::sum(), one, 0.5);
    const POW2: [f64; 6] = [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0];
    reduction(
        &m,
        w,
        "product f64",
        &|r| POW2[r.below(6) as usize],
        &|a, b| a * b,
        SystemOperation::product(),
        one,
        0.25,
    );
    // Max and min.
    let real = |r: &mut Rng| ((r.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1e6;
    // Large: reduce and all_reduce only (scans of large messages: sum i64, affine).
    reduction_parts(
        c,
        w,
        "max f64",
        &real,
        &|a: &f64, b: &f64| a.max(*b),
        SystemOperation::max(),
        one,
        0.5,
        true,
        c.len == m.len,
    );
    if c.len != m.len {
        reduction_parts(
            &m,
            w,
            "max f64",
            &real,
            &|a: &f64, b: &f64| a.max(*b),
            SystemOperation::max(),
            one,
            0.5,
            false,
            true,
        );
    }
    reduction(&m, w, "min f64", &real, &|a: &f64, b: &f64| a.min(*b), SystemOperation::min(), one, 0.5);
    reduction(&m, w, "max i32", &|r| r.next() as i32, &|a: &i32, b: &i32| *a.max(b), SystemOperation::max(), one, 7);
    reduction(&m, w, "min i64", &gen_i64, &|a: &i64, b: &i64| *a.min(b), SystemOperation::min(), one, 7);
    reduction(&m, w, "max u8", &|r| r.next() as u8, &|a: &u8, b: &u8| *a.max(b), SystemOperation::max(), one, 7);
}

/// The logical operations on u8 and bool, the bitwise ones on u64.
fn reductions_logical_and_bitwise(c: &Ctx, w: &Comm, roots: &[usize; 3]) {
    let m = c.medium();
    let one = &roots[..1];
    // Logical operations on u8 0/1 (biased so that the results are not constant) and bool.
    let bit = |p: u64| move |r: &mut Rng| u8::from(r.below(16) < p);
    reduction(
        &m,
        w,
        "logical_and u8",
        &bit(14),
        &|a, b| u8::from(*a != 0 && *b != 0),
        SystemOperation::logical_and(),
        one,
        9,
    );
    reduction(
        &m,
        w,
        "logical_or u8",
        &bit(2),
        &|a, b| u8::from(*a != 0 || *b != 0),
        SystemOperation::logical_or(),
        one,
        9,
    );
    reduction(
        &m,
        w,
        "logical_xor u8",
        &bit(8),
        &|a, b| u8::from((*a != 0) != (*b != 0)),
        SystemOperation::logical_xor(),
        one,
        9,
    );
    let flag = |p: u64| move |r: &mut Rng| r.below(16) < p;
    reduction(&m, w, "logical_and bool", &flag(14), &|a, b| *a && *b, SystemOperation::logical_and(), one, true);
    reduction(&m, w, "logical_or bool", &flag(2), &|a, b| *a || *b, SystemOperation::logical_or(), one, true);
    reduction(&m, w, "logical_xor bool", &flag(8), &|a, b| *a != *b, SystemOperation::logical_xor(), one, true);
    // Bitwise operations on u64 (biased likewise).
    reduction(
        &m,
        w,
        "bitwise_and u64",
        &|r| r.next() | r.next() | r.next(),
        &|a, b| a & b,
        SystemOperation::bitwise_and(),
        one,
        7,
    );
    reduction(
        &m,
        w,
        "bitwise_or u64",
        &|r| r.next() & r.next() & r.next(),
        &|a, b| a | b,
        SystemOperation::bitwise_or(),
        one,
        7,
    );
    reduction(&m, w, "bitwise_xor u64", &|r| r.next(), &|a, b| a ^ b, SystemOperation::bitwise_xor(), one, 7);
}

/// MAXLOC and MINLOC on (value, index) structs and tuples.
fn reductions_loc(c: &Ctx, w: &Comm, roots: &[usize; 3]) {
    let m = c.medium();
    let one = &roots[..1];
    // MAXLOC / MINLOC: few distinct values and indices, so that ties are frequent; the index
    // is unrelated to the rank so the smallest index may come from any rank.
    let vi = |r: &mut Rng| ValIdx { v: r.below(4) as f64 - 1.5, i: r.below(6) as i32 };
    let none = ValIdx { v: -99.0, i: -99 };
    // Large: reduce and all_reduce only (scans of large messages: sum i64, affine).
    reduction_parts(
        c,
        w,
        "max_loc ValIdx{f64,i32}",
        &vi,
        &maxloc_ref,
        SystemOperation::max_loc(),
        one,
        none,
        true,
        c.len == m.len,
    );
    if c.len != m.len {
        reduction_parts(
            &m,
            w,
            "max_loc ValIdx{f64,i32}",
            &vi,
            &maxloc_ref,
            SystemOperation::max_loc(),
            one,
            none,
            false,
            true,
        );
    }
    reduction(&m, w, "min_loc ValIdx{f64,i32}", &vi, &minloc_ref, SystemOperation::min_loc(), one, none);
    let il = |r: &mut Rng| IntLoc { v: r.below(4) as i32 - 2, i: r.below(6) as i32 };
    let inone = IntLoc { v: -99, i: -99 };
    reduction(&m, w, "max_loc IntLoc{i32,i32}", &il, &int_maxloc_ref, SystemOperation::max_loc(), one, inone);
    reduction(&m, w, "min_loc IntLoc{i32,i32}", &il, &int_minloc_ref, SystemOperation::min_loc(), one, inone);
    // The same on tuples (value, index).
    let tvi = |r: &mut Rng| (r.below(4) as f64 - 1.5, r.below(6) as i32);
    let tmax = |a: &(f64, i32), b: &(f64, i32)| if a.0 > b.0 || (a.0 == b.0 && a.1 < b.1) { *a } else { *b };
    reduction(&m, w, "max_loc (f64, i32)", &tvi, &tmax, SystemOperation::max_loc(), one, (-99.0, -99));
    let til = |r: &mut Rng| (r.below(4) as i64 - 2, r.below(6) as i64);
    let tmin = |a: &(i64, i64), b: &(i64, i64)| if a.0 < b.0 || (a.0 == b.0 && a.1 < b.1) { *a } else { *b };
    reduction(&m, w, "min_loc (i64, i64)", &til, &tmin, SystemOperation::min_loc(), one, (-99, -99));
}

/// A commutative user operation, and a non-commutative one at several roots.
fn reductions_user_ops(c: &Ctx, w: &Comm, roots: &[usize; 3]) {
    let m = c.medium();
    let one = &roots[..1];
    // User operations: commutative, and non-commutative at several roots.
    let add = wrapping_add_op();
    // Large: reduce and all_reduce only (scans of large messages: sum i64, affine).
    reduction_parts(
        c,
        w,
        "commutative user op (wrapping add u64)",
        &|r| r.next(),
        &|a: &u64, b: &u64| a.wrapping_add(*b),
        &add,
        one,
        7,
        true,
        c.len == m.len,
    );
    if c.len != m.len {
        reduction_parts(
            &m,
            w,
            "commutative user op (wrapping add u64)",
            &|r| r.next(),
            &|a: &u64, b: &u64| a.wrapping_add(*b),
            &add,
            one,
            7,
            false,
            true,
        );
    }
    let aff = affine_op();
    let none = Affine { a: 3, b: 5 };
    if c.len == m.len {
        reduction(c, w, "non-commutative user op (affine composition)", &gen_affine, &compose, &aff, roots, none);
    } else {
        // Large: one root; the other roots with a few thousand elements.
        reduction(c, w, "non-commutative user op (affine composition)", &gen_affine, &compose, &aff, &roots[..1], none);
        reduction_parts(
            &m,
            w,
            "non-commutative user op (affine composition)",
            &gen_affine,
            &compose,
            &aff,
            &roots[1..],
            none,
            true,
            false,
        );
    }
}

/// reduce_scatter_block: block j of the reduction goes to rank j.
fn reduce_scatter_blocks(c: &Ctx, w: &Comm) {
    fn one<T, O>(
        c: &Ctx,
        w: &Comm,
        name: &str,
        gen: &dyn Fn(&mut Rng) -> T,
        f: &dyn Fn(&T, &T) -> T,
        op: O,
        sentinel: T,
    ) where
        T: Equivalence + Copy + PartialEq + Debug,
        O: Operation + Copy,
    {
        c.step(&format!("reduce_scatter_block_into on {} ({name})", w.name));
        let n = w.size();
        let me = w.rank();
        let block = |i: usize, j: usize| c.data(name, w.members[i], j, c.len, gen);
        let send: Vec<T> = (0..n).flat_map(|j| block(me, j)).collect();
        let mut recv = vec![sentinel; c.len];
        w.comm.reduce_scatter_block_into(&send[..], &mut recv[..], op);
        let mut want = block(0, me);
        for i in 1..n {
            want = want.iter().zip(&block(i, me)).map(|(a, b)| f(a, b)).collect();
        }
        c.check(&format!("reduce_scatter_block_into on {} ({name})", w.name), &recv, &want);
    }
    let m = c.medium();
    one(c, w, "rsb sum i64", &gen_i64, &|a: &i64, b: &i64| a.wrapping_add(*b), SystemOperation::sum(), 7);
    one(&m, w, "rsb max f64", &|r| r.next() as f64, &|a: &f64, b: &f64| a.max(*b), SystemOperation::max(), 0.5);
    let aff = affine_op();
    one(&m, w, "rsb affine composition (non-commutative)", &gen_affine, &compose, &aff, Affine { a: 3, b: 5 });
}

fn reduce_local(c: &Ctx) {
    let other = (c.me + 1) % c.n;
    let a = c.data("local i64", other, 0, c.len, &gen_i64);
    let mut b = c.data("local i64", c.me, 0, c.len, &gen_i64);
    let want: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
    mpi::collective::reduce_local_into(&a[..], &mut b[..], SystemOperation::sum());
    c.check("reduce_local_into (sum i64)", &b, &want);

    let a = c.data("local affine", other, 0, c.len, &gen_affine);
    let mut b = c.data("local affine", c.me, 0, c.len, &gen_affine);
    let want: Vec<Affine> = a.iter().zip(&b).map(|(x, y)| compose(x, y)).collect();
    mpi::collective::reduce_local_into(&a[..], &mut b[..], affine_op());
    c.check("reduce_local_into (affine composition: inout = in ∘ inout)", &b, &want);

    let vi = |r: &mut Rng| ValIdx { v: r.below(3) as f64, i: r.below(5) as i32 };
    let a = c.data("local validx", other, 0, c.len, &vi);
    let mut b = c.data("local validx", c.me, 0, c.len, &vi);
    let want: Vec<ValIdx> = a.iter().zip(&b).map(|(x, y)| maxloc_ref(x, y)).collect();
    mpi::collective::reduce_local_into(&a[..], &mut b[..], SystemOperation::max_loc());
    c.check("reduce_local_into (max_loc ValIdx)", &b, &want);

    let a = c.data("local u64", other, 0, c.len, &|r| r.next());
    let mut b = c.data("local u64", c.me, 0, c.len, &|r| r.next());
    let want: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
    mpi::collective::reduce_local_into(&a[..], &mut b[..], wrapping_add_op());
    c.check("reduce_local_into (commutative user op)", &b, &want);
}

// ------------------------------------------------------------------------ communicators

/// Checks a communicator's size, rank and group against the expected members.
fn check_comm(c: &Ctx, w: &Comm) {
    let what = format!("communicator {}", w.name);
    c.step(&what);
    let pos = w.members.iter().position(|&m| m == c.me);
    c.require(&what, pos == Some(w.rank()) && w.comm.size() as usize == w.size(), || {
        format!("rank {} size {}, expected rank {pos:?} of members {:?}", w.comm.rank(), w.comm.size(), w.members)
    });
    let g = w.comm.group();
    let world_group = c.world.group();
    let ranks: Vec<i32> = (0..g.size()).collect();
    let got: Vec<Option<i32>> = g.translate_ranks(&ranks, &world_group);
    let want: Vec<Option<i32>> = w.members.iter().map(|&m| Some(m as i32)).collect();
    c.check(&format!("group of {} translated to world ranks", w.name), &got, &want);
    c.check_that(&format!("group of {}: rank", w.name), g.rank() == pos.map(|p| p as i32), || {
        format!("{:?}", g.rank())
    });
}

/// A few collectives on a communicator, checked against references computed with its
/// membership and order, with point-to-point traffic on it (tag 0) at the same time.
fn on_comm(c: &Ctx, w: &Comm) {
    check_comm(c, w);
    let (n, me) = (w.size(), w.rank());
    let next = w.comm.process_at_rank(((me + 1) % n) as i32);
    let prev = w.comm.process_at_rank(((me + n - 1) % n) as i32);
    let msg = |from: usize| c.data(&format!("p2p-{}", w.name), w.members[from], 0, 3, &gen_i64);
    let out = msg(me);
    mpi::request::scope(|scope| {
        let s = next.immediate_send_with_tag(scope, &out[..], 0);
        let root = c.rng(&format!("root-{}", w.name), 0, 0).below(n as u64) as usize;
        bcast(c, w, root);
        let aff = affine_op();
        reduction(
            c,
            w,
            "non-commutative user op (affine composition)",
            &gen_affine,
            &compose,
            &aff,
            &[root],
            Affine { a: 3, b: 5 },
        );
        allgather(c, w);
        alltoall(c, w);
        let (got, _) = prev.receive_vec_with_tag::<i64>(0);
        c.check(&format!("point-to-point on {} during its collectives", w.name), &got, &msg((me + n - 1) % n));
        s.wait();
    });
}

/// Communicators made by duplicate, the splits and split_shared: their relations to the world
/// and to each other, then collectives on them with world point-to-point traffic pending.
fn communicators(c: &Ctx) {
    let world = c.world;
    let (n, me) = (c.n, c.me);
    let wm: Vec<usize> = (0..n).collect();
    let relation = |members: &[usize]| {
        if members == &wm[..] {
            CommunicatorRelation::Congruent
        } else {
            let mut s = members.to_vec();
            s.sort();
            if s == wm {
                CommunicatorRelation::Similar
            } else {
                CommunicatorRelation::Unequal
            }
        }
    };
    let check_rel = |what: &str, got: CommunicatorRelation, want: CommunicatorRelation| {
        c.check_that(what, got == want, || format!("expected {want:?}, got {got:?}"));
    };

    c.step("communicator creation");
    let dup = world.duplicate();
    check_rel("world.duplicate().compare(world)", dup.compare(world), CommunicatorRelation::Congruent);
    check_rel("dup.compare(dup)", dup.compare(&dup), CommunicatorRelation::Identical);
    check_rel("world.compare(world)", world.compare(world), CommunicatorRelation::Identical);
    let dup = Comm { comm: &dup, members: wm.clone(), name: "duplicate".into() };

    let parity =
        world.split_by_color(Color::with_value((me % 2) as i32)).expect("a defined color gives a communicator");
    let parity =
        Comm { comm: &parity, members: (0..n).filter(|r| r % 2 == me % 2).collect(), name: "split by rank % 2".into() };
    check_rel("parity.compare(world)", parity.comm.compare(world), relation(&parity.members));

    let mod3 = world
        .split_by_color_with_key(Color::with_value((me % 3) as i32), -(me as i32))
        .expect("a defined color gives a communicator");
    let mod3 = Comm {
        comm: &mod3,
        members: (0..n).rev().filter(|r| r % 3 == me % 3).collect(),
        name: "split by rank % 3, key -rank".into(),
    };
    check_rel("mod3.compare(world)", mod3.comm.compare(world), relation(&mod3.members));

    let reversed = world.split_by_color_with_key(Color::with_value(0), -(me as i32)).expect("defined color");
    let reversed = Comm { comm: &reversed, members: (0..n).rev().collect(), name: "world reversed by key".into() };
    check_rel("reversed.compare(world)", reversed.comm.compare(world), relation(&reversed.members));
    check_rel(
        "reversed.compare(parity)",
        reversed.comm.compare(parity.comm),
        relation_between(&reversed.members, &parity.members),
    );
    let grel = reversed.comm.group().compare(&world.group());
    let want = if n == 1 { GroupRelation::Identical } else { GroupRelation::Similar };
    c.check_that("reversed.group().compare(world.group())", grel == want, || {
        format!("expected {want:?}, got {grel:?}")
    });
    let grel = parity.comm.group().compare(&dup.comm.group());
    let want = if n == 1 { GroupRelation::Identical } else { GroupRelation::Unequal };
    c.check_that("parity.group().compare(duplicate.group())", grel == want, || {
        format!("expected {want:?}, got {grel:?}")
    });

    let left_out = c.rng("undefined", 0, 0).below(n as u64) as usize;
    let color = if me == left_out { Color::undefined() } else { Color::with_value(5) };
    let without = world.split_by_color(color);
    c.require("split_by_color(Color::undefined())", without.is_none() == (me == left_out), || {
        format!("rank {me} got a communicator: {}, the undefined color was rank {left_out}'s", without.is_some())
    });

    let (chosen, sub, sub2) = subgroups(c);

    let (shared, same) = shared_by_host(c);
    let rel = if same.len() == n { CommunicatorRelation::Congruent } else { CommunicatorRelation::Unequal };
    let shared = Comm { comm: &shared, members: same, name: "split_shared".into() };
    check_rel("split_shared.compare(world)", shared.comm.compare(world), rel);

    let without = without.as_ref().map(|wo| Comm {
        comm: wo,
        members: (0..n).filter(|&r| r != left_out).collect(),
        name: "split without one rank".into(),
    });
    let sub =
        sub.as_ref().map(|s| Comm { comm: s, members: chosen.clone(), name: "split_by_subgroup_collective".into() });
    let sub2 =
        sub2.as_ref().map(|s| Comm { comm: s, members: chosen.clone(), name: "split_by_subgroup_with_tag".into() });
    traffic_across_communicators(c, &Made { dup, parity, mod3, reversed, without, sub, sub2, shared });
}

/// The communicators `communicators` made (`None`: this rank is not a member).
struct Made<'a> {
    dup: Comm<'a>,
    parity: Comm<'a>,
    mod3: Comm<'a>,
    reversed: Comm<'a>,
    without: Option<Comm<'a>>,
    sub: Option<Comm<'a>>,
    sub2: Option<Comm<'a>>,
    shared: Comm<'a>,
}

/// A random subset of the ranks in a random order, made a communicator by
/// split_by_subgroup_collective and by its members only: (the subset, both communicators).
fn subgroups(c: &Ctx) -> (Vec<usize>, Option<SimpleCommunicator>, Option<SimpleCommunicator>) {
    let world = c.world;
    let (n, me) = (c.n, c.me);
    let mut chosen: Vec<usize> = (0..n).collect();
    let mut r = c.rng("subgroup", 0, 0);
    r.shuffle(&mut chosen);
    chosen.truncate(r.range(1, n + 1));
    let chosen_ranks: Vec<i32> = chosen.iter().map(|&x| x as i32).collect();
    let group = world.group().include(&chosen_ranks);
    let sub = world.split_by_subgroup_collective(&group);
    c.require("split_by_subgroup_collective", sub.is_some() == chosen.contains(&me), || {
        format!("membership {} for subgroup {chosen:?}", sub.is_some())
    });
    // The same group created by its members only.
    let sub2 = if chosen.contains(&me) {
        let s = if c.round % 2 == 0 {
            world.split_by_subgroup_with_tag(&group, 7)
        } else {
            world.split_by_subgroup(&group)
        };
        c.require("split_by_subgroup(_with_tag)", s.is_some(), || "a member got None".into());
        s
    } else {
        None
    };
    (chosen, sub, sub2)
}

/// split_shared (a duplicate with replicas): the communicator and the world ranks on this
/// process's host.
fn shared_by_host(c: &Ctx) -> (SimpleCommunicator, Vec<usize>) {
    let world = c.world;
    let (n, me) = (c.n, c.me);
    c.step("split_shared");
    // Replicas of a rank run on different hosts, so with replicas on a grid of several hosts
    // "the ranks of my host" differs between the copies of a rank: check split_shared without
    // replicas only (a duplicate stands in for it).
    let replicated = std::env::var("P2PMPI_REPLICAS").is_ok_and(|r| r != "1");
    let shared = if replicated { world.duplicate() } else { world.split_shared(0) };
    // The ranks on this process's host: every rank on one host, or, on a grid of several
    // hosts, those whose data address has this process's IP.
    let ip = |a: Option<std::net::SocketAddr>| match a.map(|a| a.ip()) {
        Some(std::net::IpAddr::V4(v4)) => u32::from(v4) as u64,
        Some(std::net::IpAddr::V6(v6)) => u128::from(v6) as u64,
        None => 0,
    };
    let mut hosts = vec![0u64; n];
    world.all_gather_into(&ip(mpi::environment::data_address()), &mut hosts[..]);
    let same: Vec<usize> = (0..n).filter(|&r| replicated || hosts[r] == hosts[me]).collect();
    (shared, same)
}

/// Collectives on every communicator `communicators` made, with world point-to-point traffic
/// on every tag the collectives use pending throughout.
fn traffic_across_communicators(c: &Ctx, made: &Made<'_>) {
    let Made { dup, parity, mod3, reversed, without, sub, sub2, shared } = made;
    let world = c.world;
    let (n, me) = (c.n, c.me);
    // World point-to-point traffic with every tag the collectives use, pending throughout the
    // collectives of the other communicators.
    let wnext = world.process_at_rank(((me + 1) % n) as i32);
    let wprev = world.process_at_rank(((me + n - 1) % n) as i32);
    let wmsg =
        |from: usize, tag: usize| c.data("p2p-world-sub", from, tag, if tag == 0 { c.len } else { tag }, &gen_i64);
    let outgoing: Vec<Vec<i64>> = (0..=10).map(|t| wmsg(me, t)).collect();
    mpi::request::scope(|scope| {
        let sends: Vec<_> =
            outgoing.iter().enumerate().map(|(t, m)| wnext.immediate_send_with_tag(scope, &m[..], t as i32)).collect();
        // The large case on the subgroup (random members in a random order), a few thousand
        // elements on the others.
        let m = c.medium();
        on_comm(&m, parity);
        on_comm(&m, mod3);
        on_comm(&m, reversed);
        if let Some(wo) = without {
            on_comm(&m, wo);
        }
        if let Some(s) = sub {
            on_comm(c, s);
        }
        if let Some(s) = sub2 {
            on_comm(&m, s);
        }
        on_comm(&m, shared);
        on_comm(&m, dup);
        // Collectives on two communicators alternately (and the world in between).
        for k in 0..2 {
            let root = (k * 7 + 3) % n;
            bcast(&m, dup, root);
            bcast(&m, parity, root % parity.size());
            allgather(&m, dup);
            allgather(&m, mod3);
            world.barrier();
            let aff = affine_op();
            reduction(
                &m,
                parity,
                "non-commutative user op (affine composition)",
                &gen_affine,
                &compose,
                &aff,
                &[0],
                Affine { a: 3, b: 5 },
            );
            reduction(
                &m,
                dup,
                "sum i64",
                &gen_i64,
                &|a: &i64, b: &i64| a.wrapping_add(*b),
                SystemOperation::sum(),
                &[root],
                7,
            );
            dup.comm.barrier();
            alltoall(&m, reversed);
            alltoall(&m, dup);
        }
        for t in (0..=10).rev() {
            let (got, _) = wprev.receive_vec_with_tag::<i64>(t as i32);
            c.check(
                &format!("world point-to-point with tag {t} across sub-communicator collectives"),
                &got,
                &wmsg((me + n - 1) % n, t),
            );
        }
        for s in sends {
            s.wait();
        }
    });
}

fn relation_between(a: &[usize], b: &[usize]) -> CommunicatorRelation {
    if a == b {
        CommunicatorRelation::Congruent
    } else {
        let (mut x, mut y) = (a.to_vec(), b.to_vec());
        x.sort();
        y.sort();
        if x == y {
            CommunicatorRelation::Similar
        } else {
            CommunicatorRelation::Unequal
        }
    }
}

// ------------------------------------------------------------------------ groups

/// World ranks of a group's members, through translate_ranks into the world group.
fn members<G: Group>(g: &G, world: &mpi::topology::UserGroup) -> Vec<Option<i32>> {
    let ranks: Vec<i32> = (0..g.size()).collect();
    g.translate_ranks(&ranks, world)
}

fn groups(c: &Ctx) {
    let (n, me) = (c.n, c.me);
    let wg = c.world.group();
    c.check_that("world group size/rank", wg.size() as usize == n && wg.rank() == Some(me as i32), || {
        format!("size {} rank {:?}", wg.size(), wg.rank())
    });
    let some = |v: &[usize]| v.iter().map(|&x| Some(x as i32)).collect::<Vec<_>>();
    c.check("world group members", &members(&wg, &wg), &some(&(0..n).collect::<Vec<_>>()));

    let mut r = c.rng("groups", 0, 0);
    let subset = |r: &mut Rng| {
        let mut v: Vec<usize> = (0..n).collect();
        r.shuffle(&mut v);
        v.truncate(r.range(0, n + 1));
        v
    };
    for k in 0..4 {
        let (a, b) = (subset(&mut r), subset(&mut r));
        let what = |op: &str| format!("group {op} of a={a:?} and b={b:?} (case {k})");
        let ri = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
        let ga = wg.include(&ri(&a));
        let gb = wg.include(&ri(&b));
        c.check(&what("include a"), &members(&ga, &wg), &some(&a));
        c.check(&what("include b"), &members(&gb, &wg), &some(&b));
        c.check_that(&what("size"), ga.size() as usize == a.len(), || format!("{}", ga.size()));
        let pos = a.iter().position(|&x| x == me).map(|p| p as i32);
        c.check_that(&what("rank"), ga.rank() == pos, || format!("expected {pos:?}, got {:?}", ga.rank()));

        // Straightforward set computations.
        let union: Vec<usize> = a.iter().copied().chain(b.iter().copied().filter(|x| !a.contains(x))).collect();
        let inter: Vec<usize> = a.iter().copied().filter(|x| b.contains(x)).collect();
        let diff: Vec<usize> = a.iter().copied().filter(|x| !b.contains(x)).collect();
        c.check(&what("union"), &members(&ga.union(&gb), &wg), &some(&union));
        c.check(&what("intersection"), &members(&ga.intersection(&gb), &wg), &some(&inter));
        c.check(&what("difference"), &members(&ga.difference(&gb), &wg), &some(&diff));

        // include / exclude by ranks of the group a.
        let mut picks: Vec<usize> = (0..a.len()).collect();
        r.shuffle(&mut picks);
        picks.truncate(r.range(0, a.len() + 1));
        let inc: Vec<usize> = picks.iter().map(|&p| a[p]).collect();
        c.check(&what(&format!("include {picks:?} of a")), &members(&ga.include(&ri(&picks)), &wg), &some(&inc));
        let exc: Vec<usize> = (0..a.len()).filter(|p| !picks.contains(p)).map(|p| a[p]).collect();
        c.check(&what(&format!("exclude {picks:?} of a")), &members(&ga.exclude(&ri(&picks)), &wg), &some(&exc));

        // translate_rank(s) from a to b.
        let tr: Vec<Option<i32>> = a.iter().map(|x| b.iter().position(|y| y == x).map(|p| p as i32)).collect();
        let all_a: Vec<i32> = (0..a.len() as i32).collect();
        c.check(&what("translate_ranks a→b"), &ga.translate_ranks(&all_a, &gb), &tr);
        for (i, t) in tr.iter().enumerate() {
            c.check_that(&what("translate_rank a→b"), ga.translate_rank(i as i32, &gb) == *t, || format!("rank {i}"));
        }

        // compare.
        let rel = |x: &[usize], y: &[usize]| {
            if x == y {
                GroupRelation::Identical
            } else {
                let (mut s, mut t) = (x.to_vec(), y.to_vec());
                s.sort();
                t.sort();
                if s == t {
                    GroupRelation::Similar
                } else {
                    GroupRelation::Unequal
                }
            }
        };
        let reversed: Vec<usize> = a.iter().rev().copied().collect();
        let gr = wg.include(&ri(&reversed));
        for (label, got, want) in [
            ("compare a a", ga.compare(&ga), GroupRelation::Identical),
            ("compare a b", ga.compare(&gb), rel(&a, &b)),
            ("compare a reversed(a)", ga.compare(&gr), rel(&a, &reversed)),
            (
                "compare a∪b b∪a",
                ga.union(&gb).compare(&gb.union(&ga)),
                rel(&union, &b.iter().copied().chain(a.iter().copied().filter(|x| !b.contains(x))).collect::<Vec<_>>()),
            ),
            (
                "compare a∩b a∖(a∖b)",
                ga.intersection(&gb).compare(&ga.difference(&ga.difference(&gb))),
                GroupRelation::Identical,
            ),
        ] {
            c.check_that(&what(label), got == want, || format!("expected {want:?}, got {got:?}"));
        }
    }

    // The empty group.
    let e = SystemGroup::empty();
    c.check_that("SystemGroup::empty() size/rank", e.size() == 0 && e.rank().is_none(), || {
        format!("size {} rank {:?}", e.size(), e.rank())
    });
    c.check("world ∪ empty", &members(&wg.union(&e), &wg), &some(&(0..n).collect::<Vec<_>>()));
    c.check_that("world ∩ empty", wg.intersection(&e).size() == 0, || "not empty".into());
    c.check_that("world ∖ world = empty", wg.difference(&wg).compare(&e) == GroupRelation::Identical, || {
        "not identical".into()
    });
    c.check_that("empty compare empty", e.compare(&e) == GroupRelation::Identical, || format!("{:?}", e.compare(&e)));
    c.check_that("world compare empty", wg.compare(&e) == GroupRelation::Unequal, || format!("{:?}", wg.compare(&e)));
    c.check_that("world.include([])", wg.include(&[]).compare(&e) == GroupRelation::Identical, || {
        "not identical".into()
    });
    c.check_that("world.exclude(all)", wg.exclude(&(0..n as i32).collect::<Vec<_>>()).size() == 0, || {
        "not empty".into()
    });
    c.check_that("translate into empty", wg.translate_rank(0, &e).is_none(), || "translated".into());
    c.check_that("world compare world.exclude([])", wg.compare(&wg.exclude(&[])) == GroupRelation::Identical, || {
        "not identical".into()
    });
}

// ------------------------------------------------------------------------ targeted cases

/// `coll_checks gaps`: all_gather_varcount_into must write the parts only, not the gaps
/// between them (each rank has its own content there).
fn gaps(world: &SimpleCommunicator) {
    let (n, me) = (world.size() as usize, world.rank() as usize);
    // Part i: one element at displacement 2i + 1; elements 0, 2, 4, … are gaps.
    let counts = vec![1 as Count; n];
    let displs: Vec<Count> = (0..n as Count).map(|i| 2 * i + 1).collect();
    let sentinel = -1000 - me as i64;
    let mut all = vec![sentinel; 2 * n + 1];
    {
        let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        world.all_gather_varcount_into(&(me as i64), &mut part);
    }
    let want: Vec<i64> = (0..2 * n + 1).map(|k| if k % 2 == 1 { (k / 2) as i64 } else { sentinel }).collect();
    assert_eq!(
        all, want,
        "rank {me}: all_gather_varcount_into wrote outside its parts (n={n}, counts {counts:?}, displs {displs:?})"
    );
    // The same into bools (received through a staged copy, see `fill_parts`): the gaps keep
    // their value too.
    let mut flags = vec![true; 2 * n + 1];
    {
        let mut part = PartitionMut::new(&mut flags[..], &counts[..], &displs[..]);
        world.all_gather_varcount_into(&(me % 2 == 1), &mut part);
    }
    let want: Vec<bool> = (0..2 * n + 1).map(|k| k % 2 == 0 || (k / 2) % 2 == 1).collect();
    assert_eq!(flags, want, "rank {me}: all_gather_varcount_into of bools");
    // Bytes other than 0 and 1 received into bools arrive as `true`.
    let mut flags = vec![false; n];
    world.all_gather_into(&(me as u8 + 1), &mut flags[..]);
    assert!(flags.iter().all(|&f| f), "rank {me}: bytes 1..={n} received as bools: {flags:?}");
    world.barrier();
    if me == 0 {
        println!("OK gaps");
    }
}

/// `coll_checks zero-parts gather|all_gather|all_to_all`: a part of zero elements references
/// no memory, so its displacement may equal the start of another part (here: rank n−1 sends
/// nothing and its part is placed at displacement 0, where rank 0's part starts).
fn zero_parts(world: &SimpleCommunicator, which: &str) {
    let (n, me) = (world.size() as usize, world.rank() as usize);
    let counts: Vec<Count> = (0..n).map(|i| if i + 1 == n { 0 } else { 1 }).collect();
    let displs: Vec<Count> = (0..n).map(|i| if i + 1 == n { 0 } else { i as Count }).collect();
    let mine: Vec<i64> = if me + 1 == n { vec![] } else { vec![10 * me as i64] };
    let want: Vec<i64> = (0..n - 1).map(|i| 10 * i as i64).collect();
    let mut all = vec![-1i64; n - 1];
    match which {
        "gather" => {
            let root = world.process_at_rank(0);
            if me == 0 {
                let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
                root.gather_varcount_into_root(&mine[..], &mut part);
            } else {
                root.gather_varcount_into(&mine[..]);
                all = want.clone();
            }
        }
        "all_gather" => {
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(&mine[..], &mut part);
        }
        "all_to_all" => {
            // Every rank sends its element (none from rank n−1) to everyone.
            let scounts = vec![mine.len() as Count; n];
            let sdispls = vec![0 as Count; n];
            let send = Partition::new(&mine[..], &scounts[..], &sdispls[..]);
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            world.all_to_all_varcount_into(&send, &mut part);
        }
        other => panic!("unknown zero-parts kind {other}"),
    }
    assert_eq!(
        all, want,
        "rank {me}: {which} with a zero-count part at displacement 0 (counts {counts:?}, displs {displs:?})"
    );
    world.barrier();
    if me == 0 {
        println!("OK zero-parts {which}");
    }
}

// ------------------------------------------------------------------------ failure mode

/// Ranks disagree on the sizes of a collective: the job must stop with a clear message.
fn mismatch(world: &SimpleCommunicator, which: &str) {
    let (n, me) = (world.size() as usize, world.rank() as usize);
    let k = 4 + me;
    match which {
        "all_gather" => {
            let mine = vec![me as u64; k];
            let mut all = vec![0u64; k * n];
            world.all_gather_into(&mine[..], &mut all[..]);
        }
        "broadcast" => {
            let mut buf = vec![me as u64; k * 1000];
            world.process_at_rank(0).broadcast_into(&mut buf[..]);
        }
        "broadcast_larger_root" => {
            // The root (the last rank) has the largest buffer: the others receive too much.
            let mut buf = vec![me as u64; k * 1000];
            world.process_at_rank(n as i32 - 1).broadcast_into(&mut buf[..]);
        }
        "all_reduce" => {
            let mine = vec![me as u64; k];
            let mut out = vec![0u64; k];
            world.all_reduce_into(&mine[..], &mut out[..], SystemOperation::sum());
        }
        other => panic!("unknown mismatch kind {other}"),
    }
    world.barrier();
    println!("rank {me}: mismatched {which} returned");
}
