//! Reusable byte buffers for message payloads and collective scratch space.
//!
//! Allocating and freeing a fresh 64 KiB buffer per message made glibc return the memory to
//! the kernel and fault it back in every time (page faults were the top cost of a 64 KiB
//! reduce). Buffers are recycled per thread instead, up to a bounded total.

use std::cell::RefCell;

/// Buffers larger than this are not kept.
const MAX_KEEP: usize = 4 << 20;
/// At most this many buffers are kept per thread.
const MAX_BUFFERS: usize = 32;

thread_local! {
    // Per thread (not in the context) because it is each thread's cache of free buffers,
    // taken from and given back to without a lock; it holds no state of the running process.
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A zero-filled buffer of `len` bytes (recycled when possible).
pub(crate) fn zeroed(len: usize) -> Vec<u8> {
    let mut v = take(len);
    v.resize(len, 0);
    v
}

/// A copy of `data` in a recycled buffer.
pub(crate) fn copy_of(data: &[u8]) -> Vec<u8> {
    let mut v = take(data.len());
    v.extend_from_slice(data);
    v
}

/// An empty buffer with room for `len` bytes (recycled when possible): for data written
/// through its pointer, then [`Vec::set_len`] once every byte is there — no zero-filling.
pub(crate) fn with_room(len: usize) -> Vec<u8> {
    take(len)
}

/// An empty buffer with room for `len` bytes.
fn take(len: usize) -> Vec<u8> {
    let got = FREE.with(|f| {
        let mut f = f.borrow_mut();
        // The smallest buffer that fits, and not one much larger than asked: a small copy
        // may be kept long (a replica's recent messages), and must not pin a large buffer.
        let most = len.saturating_mul(4).max(4096);
        let (i, _) = f
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() <= most)
            .min_by_key(|(_, v)| v.capacity())?;
        Some(f.swap_remove(i))
    });
    match got {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(len),
    }
}

/// Returns a buffer for reuse.
pub(crate) fn give(v: Vec<u8>) {
    if v.capacity() == 0 || v.capacity() > MAX_KEEP {
        return;
    }
    // `try_with`: a buffer dropped while the thread exits is simply freed.
    let _ = FREE.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < MAX_BUFFERS {
            f.push(v);
        } else if let Some(small) = f.iter_mut().min_by_key(|b| b.capacity()) {
            if small.capacity() < v.capacity() {
                *small = v;
            }
        }
    });
}

/// Buffers up to this size come from the heap once [`warm_heap`] ran (larger ones are mapped
/// and unmapped by glibc as usual).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_UP_TO: usize = MAX_KEEP;

/// Faults in `bytes` of heap now and keeps it: glibc no longer gives freed memory back to the
/// kernel below twice that, nor maps buffers up to [`MAX_KEEP`] apart from the heap.
///
/// For a replica that is not its rank's master: it copies every small message it sends and
/// keeps the copies its master committed lately (up to `RECENT_WINDOW` plus
/// `BACKUP_WINDOW`). Without this, those copies land in memory touched for the first time —
/// a page fault per 4 KiB, about 2 000 per phase of 8–64 KiB messages — which made the
/// replicas fall behind at the start of each new message size until their master's writes to
/// them blocked for milliseconds (`docs/benchmarks.md`, "The replicas' first touches").
pub(crate) fn warm_heap(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // The thresholds are the process's: a smaller warming after a larger one (the
        // library's tests warm in several threads) keeps the larger threshold, or freeing its
        // pieces would make glibc give back what the larger one faulted in.
        static KEEP: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
        {
            let mut kept = KEEP.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *kept = (*kept).max(bytes.saturating_mul(2).min(i32::MAX as usize));
            // SAFETY: mallopt only changes two of glibc's allocation thresholds; it touches no
            // memory of ours.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_UP_TO as libc::c_int);
                libc::mallopt(libc::M_TRIM_THRESHOLD, *kept as libc::c_int);
            }
        }
        // Pieces under the mapping threshold come from the heap; a byte written in each page
        // (calloc skips zeroing fresh pages, so every page is faulted in here, not before:
        // cheap even in a debug build), then freed back to glibc, which keeps them.
        const PIECE: usize = 256 << 10;
        const PAGE: usize = 4096;
        let pieces: Vec<Vec<u8>> = (0..bytes.div_ceil(PIECE))
            .map(|_| {
                let mut v = vec![0u8; PIECE];
                for i in (0..PIECE).step_by(PAGE) {
                    v[i] = 1;
                }
                v
            })
            .collect();
        std::hint::black_box(&pieces);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

/// A pooled buffer that goes back to the pool when dropped.
pub(crate) struct Scratch(Vec<u8>);

impl Scratch {
    pub fn zeroed(len: usize) -> Scratch {
        Scratch(zeroed(len))
    }
    pub fn copy_of(data: &[u8]) -> Scratch {
        Scratch(copy_of(data))
    }
}

impl std::ops::Deref for Scratch {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far.
    fn faults() -> i64 {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a whole `rusage` into the buffer it is given.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
        assert_eq!(rc, 0, "getrusage");
        // SAFETY: initialised by the successful call above (and zeroed before it).
        unsafe { u.assume_init() }.ru_minflt
    }

    /// Copies of the sizes a replica keeps (8 KiB to 128 KiB), written whole, as many as its
    /// windows hold.
    fn copies(total: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut size = 8 << 10;
        let mut have = 0;
        while have < total {
            let mut v = Vec::with_capacity(size);
            v.resize(size, 7u8);
            have += size;
            out.push(v);
            size = if size >= 128 << 10 { 8 << 10 } else { size * 2 };
        }
        out
    }

    #[test]
    fn a_warmed_heap_takes_a_replicas_copies_without_page_faults() {
        // A thread of its own: its own glibc arena, its own fault count.
        std::thread::spawn(|| {
            warm_heap(12 << 20);
            let before = faults();
            let kept = copies(10 << 20);
            let taken = faults() - before;
            std::hint::black_box(&kept);
            // Untouched memory costs a fault per 4 KiB page: about 2 560 for these 10 MiB.
            assert!(taken < 200, "{taken} page faults for 10 MiB of copies after warming 12 MiB");
            drop(kept);
            // Given back and taken again: still warm (glibc keeps what it was given back).
            let before = faults();
            let again = copies(10 << 20);
            let taken = faults() - before;
            std::hint::black_box(&again);
            assert!(taken < 200, "{taken} page faults for copies made again");
        })
        .join()
        .expect("warm-heap thread");
    }
}
