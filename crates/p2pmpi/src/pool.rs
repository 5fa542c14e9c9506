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
