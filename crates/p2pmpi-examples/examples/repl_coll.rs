//! A collective-heavy loop with a fixed amount of work, for the replication benchmark
//! (`bench/replication.sh`: `p2pmpirun -n 4 -r R repl_coll`, the job's wall time per R).
//!
//! Usage: `p2pmpirun -n N [-r R] repl_coll [STEPS [BYTES [FANOUT]]]`
//! - STEPS: iterations (default 1000);
//! - BYTES: size of the broadcast buffer (default 1024);
//! - FANOUT: see below (default 1: off).
//!
//! An empty argument means its default. Every step: an allreduce (sum) of one `u64` that
//! depends on the rank, the step and the previous results; a broadcast of BYTES bytes from
//! root `step % N` (the root rotates, so nothing pipelines across steps); a barrier.
//! Rank 0 times the loop (from a barrier before it to the end of the last barrier) and
//! prints `replcoll <np> <steps> <bytes> <loop_ms> <us_per_step> <checksum>`; the checksum
//! (hex) depends on every result, so runs with different R must print the same one.
//!
//! **Fan-out mode** (`-n N·K` without `-r`, FANOUT = K > 1): the traffic of `-n N -r K` done by
//! hand, as the baseline of what K replicas cost the machine without the library's protocol.
//! Process `p` is copy `p % K` of logical rank `p / K`; the library's own algorithms for these
//! sizes (dissemination barrier, binomial broadcast, recursive-doubling allreduce: the
//! defaults of `p2pmpi::collective` for N = 4) run over the logical ranks, and each logical
//! message is sent by the sender's first copy to every copy of its destination, followed by
//! an 8-byte commit to the sender's other copies (which receive it where they would have
//! sent). It prints the same line, with the logical N, and the same checksum as the
//! collectives do at `-n N`.
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

const TAG_BARRIER: i32 = 1;
const TAG_BCAST: i32 = 2;
const TAG_ALLREDUCE: i32 = 3;
const TAG_COMMIT: i32 = 9;

/// Logical ranks over `K` copies each, point-to-point by hand.
struct Fanout<'a> {
    world: &'a SimpleCommunicator,
    k: i32,
    me: i32,
    first: bool,
    commits: u64,
}

impl Fanout<'_> {
    fn n(&self) -> i32 {
        self.world.size() / self.k
    }

    /// The sender's half of a logical message: the first copy transmits to every copy of
    /// `dst`, then commits to its own copies; the others receive that commit.
    fn send(&mut self, dst: i32, tag: i32, data: &[u8]) {
        let base = self.world.rank() - self.world.rank() % self.k;
        if self.first {
            mpi::request::scope(|scope| {
                let reqs: Vec<_> = (0..self.k)
                    .map(|c| self.world.process_at_rank(dst * self.k + c).immediate_send_with_tag(scope, data, tag))
                    .collect();
                for r in reqs {
                    r.wait();
                }
            });
            self.commits += 1;
            for c in 1..self.k {
                self.world.process_at_rank(base + c).send_with_tag(&[self.commits][..], TAG_COMMIT);
            }
        } else {
            let mut commit = [0u64; 1];
            self.world.process_at_rank(base).receive_into_with_tag(&mut commit[..], TAG_COMMIT);
        }
    }

    /// A logical receive: from the first copy of `src`.
    fn recv(&self, src: i32, tag: i32, buf: &mut [u8]) {
        self.world.process_at_rank(src * self.k).receive_into_with_tag(buf, tag);
    }

    /// Receive posted first, then the send, as the library's `sendrecv`.
    fn sendrecv(&mut self, dst: i32, out: &[u8], src: i32, inp: &mut [u8], tag: i32) {
        let world = self.world;
        let from = world.process_at_rank(src * self.k);
        mpi::request::scope(|scope| {
            let r = from.immediate_receive_into_with_tag(scope, inp, tag);
            self.send(dst, tag, out);
            r.wait();
        });
    }

    fn barrier(&mut self) {
        let n = self.n();
        let mut dist = 1;
        while dist < n {
            let to = (self.me + dist) % n;
            let from = (self.me - dist).rem_euclid(n);
            self.sendrecv(to, &[], from, &mut [], TAG_BARRIER);
            dist *= 2;
        }
    }

    fn bcast(&mut self, buf: &mut [u8], root: i32) {
        let n = self.n();
        let vrank = (self.me - root).rem_euclid(n);
        let mut mask = 1;
        while mask < n {
            if vrank & mask != 0 {
                self.recv((vrank - mask + root) % n, TAG_BCAST, buf);
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if vrank + mask < n {
                self.send((vrank + mask + root) % n, TAG_BCAST, buf);
            }
            mask >>= 1;
        }
    }

    /// Recursive doubling over a power-of-two number of logical ranks.
    fn all_reduce_sum(&mut self, v: u64) -> u64 {
        let n = self.n();
        assert!(n.count_ones() == 1, "fan-out mode needs a power-of-two number of logical ranks");
        let mut acc = v;
        let mut mask = 1;
        while mask < n {
            let partner = self.me ^ mask;
            let mut theirs = [0u8; 8];
            self.sendrecv(partner, &acc.to_le_bytes(), partner, &mut theirs, TAG_ALLREDUCE);
            acc = acc.wrapping_add(u64::from_le_bytes(theirs));
            mask <<= 1;
        }
        acc
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let steps: u64 = arg(0).map_or(1000, |s| s.parse().expect("STEPS"));
    let bytes: usize = arg(1).map_or(1024, |s| s.parse().expect("BYTES"));
    let k: i32 = arg(2).map_or(1, |s| s.parse().expect("FANOUT"));

    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    assert!(k >= 1 && world.size() % k == 0, "FANOUT must divide the number of processes");
    let mut fan =
        (k > 1).then(|| Fanout { world: &world, k, me: world.rank() / k, first: world.rank() % k == 0, commits: 0 });
    let (rank, np) = match &fan {
        Some(f) => (f.me, f.n()),
        None => (world.rank(), world.size()),
    };
    let mut buf = vec![0u8; bytes.max(1)];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mix = |h: &mut u64, x: u64| *h = (*h ^ x).wrapping_mul(0x100_0000_01b3);

    world.barrier();
    let t0 = mpi::time();
    for step in 0..steps {
        let v = (rank as u64 + 1).wrapping_mul(step + 1) ^ ((h >> 7) % 1_000_003);
        let sum = match fan.as_mut() {
            Some(f) => f.all_reduce_sum(v),
            None => {
                let mut sum = 0u64;
                world.all_reduce_into(&v, &mut sum, SystemOperation::sum());
                sum
            }
        };
        mix(&mut h, sum);
        let root = (step % np as u64) as i32;
        if rank == root {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i as u64 ^ sum ^ step) as u8;
            }
        }
        match fan.as_mut() {
            Some(f) => f.bcast(&mut buf[..bytes], root),
            None => world.process_at_rank(root).broadcast_into(&mut buf[..bytes]),
        }
        mix(&mut h, buf[..bytes].iter().fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64)));
        match fan.as_mut() {
            Some(f) => f.barrier(),
            None => world.barrier(),
        }
    }
    let dt = mpi::time() - t0;
    if world.rank() == 0 {
        let per = dt / steps.max(1) as f64 * 1e6;
        println!("replcoll {np} {steps} {bytes} {:.3} {per:.3} {h:016x}", dt * 1e3);
    }
}
