//! The distributed JEL implementation's memory and convergence in the join test, bounded
//! (docs/sim/jel.md, "10 000 nodes: the distributed implementation"): every simulated node
//! holds the whole pool, so what each (member, member) pair costs decides whether 10 000
//! nodes fit (it took ~140 bytes a pair, ~14 GB at 10 000, and 20-entry exchanges did not
//! converge at 2000 nodes within 10 minutes). This binary counts the heap's peak with an
//! allocator of its own (its own process: the other tests are not affected).

use p2pmpi_sim::jel::{join_run, Impl, JoinParams, Network};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only counters are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on unchanged.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = NOW.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: a pointer this allocator (the system's) gave for this layout.
        unsafe { System.dealloc(p, l) };
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as for dealloc; the caller's new size, passed on unchanged.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = NOW.fetch_add(new - l.size(), Ordering::Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                NOW.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn distributed_nodes_converge_within_40_s_in_fewer_than_90_bytes_per_member_pair() {
    let n = 800;
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = join_run(JoinParams {
        n,
        imp: Impl::Distributed,
        net: Network::DAS3,
        id_bytes: 256,
        spread: Duration::from_secs(5),
        duration: Duration::from_secs(60),
        seed: 1,
    });
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let per_pair = peak as f64 / (n * n) as f64;
    eprintln!(
        "{n} nodes: everyone sees everyone at {:?} s, heap peak {:.1} MB, {per_pair:.1} bytes per member pair",
        r.t_full,
        peak as f64 / 1e6
    );
    // Before: 20-entry exchanges, everyone at ~300 s at 1000 nodes.
    assert!(r.t_full.is_some_and(|t| t <= 40.0), "everyone must see everyone within 40 s: {:?}", r.t_full);
    // 69.6 measured (fixed costs per node included: the digest, its ranges); before, ~140
    // in the member table alone.
    assert!(per_pair < 90.0, "{per_pair:.1} bytes per member pair");
}
