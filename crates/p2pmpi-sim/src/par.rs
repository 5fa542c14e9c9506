//! Parallel map over job indices with scoped threads: results come back in job order, so the
//! output does not depend on the number of threads or on scheduling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The number of threads to use when the user did not say: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// `(0..jobs).map(f)` on `threads` threads, in order. Jobs are handed out one at a time
/// (largest first if the caller orders them so), which balances uneven jobs.
pub fn par_map<T: Send, F: Fn(usize) -> T + Sync>(jobs: usize, threads: usize, f: F) -> Vec<T> {
    let threads = threads.clamp(1, jobs.max(1));
    if threads == 1 {
        return (0..jobs).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= jobs {
                    break;
                }
                let r = f(j);
                out.lock().unwrap()[j] = Some(r);
            });
        }
    });
    out.into_inner().unwrap().into_iter().map(|r| r.expect("every job ran")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_are_in_job_order() {
        let v = super::par_map(100, 4, |j| j * j);
        assert_eq!(v, (0..100).map(|j| j * j).collect::<Vec<_>>());
        assert!(super::par_map(0, 4, |j| j).is_empty());
    }
}
