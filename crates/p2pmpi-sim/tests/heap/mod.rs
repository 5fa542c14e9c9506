//! A heap counter for the memory tests of the JEL join runs: this test binary's global
//! allocator passes every call to the system's and keeps the bytes in use and their peak.
//! Each test binary that includes it is its own process, so other tests do not disturb it.

use p2pmpi_sim::jel::{join_run, JoinParams, JoinRun};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Runs the join test `p`: its result and its heap peak (bytes above what was in use before)
/// per (member, member) pair.
pub fn join_run_per_pair(p: JoinParams) -> (JoinRun, f64) {
    let n = p.n;
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = join_run(p);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let per_pair = peak as f64 / (n * n) as f64;
    eprintln!("{n} nodes: heap peak {:.1} MB, {per_pair:.1} bytes per member pair", peak as f64 / 1e6);
    (r, per_pair)
}
