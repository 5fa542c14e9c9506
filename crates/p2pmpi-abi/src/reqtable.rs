//! The table of request handles without a lock: a slot per live request, each with its own
//! state word, in chunks that never move.
//!
//! A request is made and completed by every nonblocking call, so its table is on the hot
//! path of `MPI_Isend` + `MPI_Test`: here making one takes no atomic read-modify-write (a
//! free index comes from the thread's own list, the slot is published by a plain release
//! store) and using one takes one (the compare-and-swap that claims its slot; giving it
//! back is a release store). With a table behind one lock every making and every test took
//! the lock and gave it back: two atomic read-modify-writes each.
//!
//! The states of a slot: free (no object; its index sits in some free list), live, busy (a
//! thread reads or changes the object for a moment: another one waits for it), lent (a
//! thread tests the request in place, which may drive the engine: meanwhile the handle names
//! nothing for the others, as a request taken out would). MPI forbids two threads to use one
//! request at once; the states keep such a program from corrupting the table, not from its
//! own error.
//!
//! Free indices: each thread keeps those its completions freed and reuses them for its next
//! requests (the common pattern: a thread completes what it started); beyond
//! [`LOCAL_AT_MOST`] they go to a shared pool, as they do when the thread ends; fresh
//! indices are handed out [`BATCH`] at a time.

use crate::handle_bits::{make, DIRECT, INDEX_BITS};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::sync::Mutex;
use std::thread::LocalKey;

const FREE: u8 = 0;
const LIVE: u8 = 1;
const BUSY: u8 = 2;
const LENT: u8 = 3;

/// Slots of the first chunk (a power of two); chunk `k` has `FIRST << k`.
const FIRST_LOG: u32 = 5;
/// Chunks enough for every index of a handle.
const CHUNKS: usize = (INDEX_BITS - FIRST_LOG + 1) as usize;
/// Free indices a thread keeps at most before giving half to the pool.
const LOCAL_AT_MOST: usize = 256;
/// Fresh indices taken at once.
const BATCH: u32 = 32;

struct Slot<T> {
    state: AtomicU8,
    val: UnsafeCell<Option<T>>,
}

/// A thread's free indices of one table (declared by the table's owner with
/// `thread_local!`, see [`Table::new`]); given to the table's pool when the thread ends.
pub struct Local {
    free: RefCell<Vec<u32>>,
    pool: Cell<Option<&'static Mutex<Vec<u32>>>>,
}

impl Local {
    /// An empty list.
    pub const fn new() -> Local {
        Local { free: RefCell::new(Vec::new()), pool: Cell::new(None) }
    }
}

impl Default for Local {
    fn default() -> Local {
        Local::new()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(p) = self.pool.get() {
            lock(p).append(self.free.get_mut());
        }
    }
}

fn lock(m: &Mutex<Vec<u32>>) -> std::sync::MutexGuard<'_, Vec<u32>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A table of objects named by handles of kind [`DIRECT`] and object `obj`; see the module.
pub struct Table<T: 'static> {
    obj: u32,
    chunks: [AtomicPtr<Slot<T>>; CHUNKS],
    /// Taken to allocate a chunk.
    grow: Mutex<()>,
    /// The first index never handed out.
    next: AtomicU32,
    /// Free indices given back by threads.
    pool: Mutex<Vec<u32>>,
    local: &'static LocalKey<Local>,
}

// SAFETY: an object is only reached by the thread that claimed its slot (the state word's
// compare-and-swap, acquire; given back by a release store), or by the one that owns its
// free index (which no other thread holds); the objects move between threads, hence `Send`.
unsafe impl<T: Send> Sync for Table<T> {}

/// Gives a claimed slot back when dropped (also if the code using it panicked): live if it
/// holds an object, else free (and its index to the free list).
struct Claim<'a, T: 'static> {
    table: &'static Table<T>,
    slot: &'a Slot<T>,
    index: u32,
}

impl<T> Drop for Claim<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the slot is claimed by this thread (see `Table::claim`).
        if unsafe { (*self.slot.val.get()).is_some() } {
            self.slot.state.store(LIVE, Ordering::Release);
        } else {
            self.slot.state.store(FREE, Ordering::Release);
            self.table.free_index(self.index);
        }
    }
}

impl<T: 'static> Table<T> {
    /// An empty table of objects of kind `obj` (one of [`crate::handle_bits::object`]) whose
    /// threads keep their free indices in `local`, used by no other table.
    pub const fn new(obj: u32, local: &'static LocalKey<Local>) -> Table<T> {
        Table {
            obj,
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS],
            grow: Mutex::new(()),
            next: AtomicU32::new(0),
            pool: Mutex::new(Vec::new()),
            local,
        }
    }

    /// Chunk and offset of index `i`.
    #[inline]
    fn place(i: u32) -> (usize, usize) {
        let j = i + (1 << FIRST_LOG);
        let k = 31 - j.leading_zeros();
        ((k - FIRST_LOG) as usize, (j - (1 << k)) as usize)
    }

    #[inline]
    fn slot(&self, i: u32) -> Option<&Slot<T>> {
        let (k, off) = Self::place(i);
        let p = self.chunks.get(k)?.load(Ordering::Acquire);
        // SAFETY: a published chunk (never freed) of `FIRST << k` slots, and `off` below that.
        (!p.is_null()).then(|| unsafe { &*p.add(off) })
    }

    /// The index of `h` if it is a handle of this table.
    #[inline]
    fn index(&self, h: c_int) -> Option<u32> {
        let bits = h as u32;
        (bits >> 30 == DIRECT && (bits >> INDEX_BITS) & 0xf == self.obj).then_some(bits & ((1 << INDEX_BITS) - 1))
    }

    /// Claims the slot of live object `h` in state `to` (waiting while another thread has it
    /// busy), or `None` if `h` names no live object.
    #[inline]
    fn claim(&'static self, h: c_int, to: u8) -> Option<Claim<'static, T>> {
        let index = self.index(h)?;
        let slot = self.slot(index)?;
        let mut spins = 0u32;
        loop {
            match slot.state.compare_exchange_weak(LIVE, to, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Claim { table: self, slot, index }),
                Err(BUSY) | Err(LIVE) => {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Stores `t`; returns its new handle.
    #[inline(always)]
    pub fn insert(&'static self, t: T) -> c_int {
        let i = self.take_index();
        let slot = self.slot(i).expect("a chunk made for every index handed out");
        // SAFETY: index `i` is this thread's alone (taken off a free list or fresh), so its
        // slot is free (empty: nothing to drop) and no other thread reaches its object.
        unsafe { slot.val.get().write(Some(t)) };
        slot.state.store(LIVE, Ordering::Release);
        make(DIRECT, self.obj, i)
    }

    /// What `f` makes of the object of handle `h`, if `h` names a live one of this table.
    #[inline]
    pub fn with<R>(&'static self, h: c_int, f: impl FnOnce(&T) -> R) -> Option<R> {
        let c = self.claim(h, BUSY)?;
        // SAFETY: claimed: this thread's alone until `c` is dropped; live, so `Some`.
        unsafe { (*c.slot.val.get()).as_ref().map(f) }
    }

    /// What `f` makes of the object of handle `h`, changing it, if `h` names a live one.
    #[inline]
    pub fn with_mut<R>(&'static self, h: c_int, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let c = self.claim(h, BUSY)?;
        // SAFETY: as in `with`.
        unsafe { (*c.slot.val.get()).as_mut().map(f) }
    }

    /// What `f` makes of the slot of live object `h`, lent to this thread meanwhile (for
    /// the others `h` names nothing): `f` may take the object out, which frees the slot.
    #[inline]
    pub fn lend<R>(&'static self, h: c_int, f: impl FnOnce(&mut Option<T>) -> R) -> Option<R> {
        let c = self.claim(h, LENT)?;
        // SAFETY: as in `with`.
        Some(f(unsafe { &mut *c.slot.val.get() }))
    }

    /// Whether every handle of `hs` is `null` or names a live object of which `f` holds.
    pub fn all(&'static self, hs: &[c_int], null: c_int, f: impl Fn(&T) -> bool) -> bool {
        hs.iter().all(|&h| h == null || self.with(h, &f) == Some(true))
    }

    /// Frees the slot of `h` if `f` says so of what it holds; returns what it held.
    #[inline]
    pub fn take_if(&'static self, h: c_int, f: impl FnOnce(&T) -> bool) -> Option<T> {
        let c = self.claim(h, BUSY)?;
        // SAFETY: as in `with`.
        let v = unsafe { &mut *c.slot.val.get() };
        if f(v.as_ref()?) {
            v.take()
        } else {
            None
        }
    }

    /// Frees the slot of `h`; returns what it held.
    #[inline]
    pub fn take(&'static self, h: c_int) -> Option<T> {
        self.take_if(h, |_| true)
    }

    /// Number of live handles.
    pub fn len(&self) -> usize {
        let n = self.next.load(Ordering::Acquire);
        (0..n).filter(|&i| self.slot(i).is_some_and(|s| s.state.load(Ordering::Acquire) != FREE)).count()
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A free index, this thread's alone.
    #[inline]
    fn take_index(&'static self) -> u32 {
        self.local
            .try_with(|l| {
                let mut f = l.free.borrow_mut();
                if let Some(i) = f.pop() {
                    return i;
                }
                l.pool.set(Some(&self.pool));
                self.refill(&mut f);
                f.pop().expect("refilled")
            })
            .unwrap_or_else(|_| {
                // The thread is ending: one index from the pool or a fresh one.
                let mut f = Vec::new();
                self.refill(&mut f);
                lock(&self.pool).extend(f.iter().skip(1));
                f[0]
            })
    }

    /// Fills `f` with free indices: from the pool, else fresh ones (their chunks made).
    #[cold]
    fn refill(&self, f: &mut Vec<u32>) {
        {
            let mut p = lock(&self.pool);
            let n = p.len().min(BATCH as usize);
            let from = p.len() - n;
            f.extend(p.drain(from..));
        }
        if !f.is_empty() {
            return;
        }
        let first = self.next.fetch_add(BATCH, Ordering::AcqRel);
        assert!(first + BATCH <= 1 << INDEX_BITS, "too many MPI requests at once");
        for i in first..first + BATCH {
            self.make_chunk(i);
        }
        // Popped from the end: the lowest first.
        f.extend((first..first + BATCH).rev());
    }

    /// Makes the chunk of index `i` if it is not made yet.
    fn make_chunk(&self, i: u32) {
        let (k, _) = Self::place(i);
        if !self.chunks[k].load(Ordering::Acquire).is_null() {
            return;
        }
        let _g = self.grow.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.chunks[k].load(Ordering::Acquire).is_null() {
            return;
        }
        let slots: Box<[Slot<T>]> = (0..1usize << (k as u32 + FIRST_LOG))
            .map(|_| Slot { state: AtomicU8::new(FREE), val: UnsafeCell::new(None) })
            .collect();
        // Never freed: the table lives as long as the process.
        self.chunks[k].store(Box::into_raw(slots).cast::<Slot<T>>(), Ordering::Release);
    }

    /// Gives index `i` (its slot freed) back: to this thread's list, or the pool.
    #[inline]
    fn free_index(&'static self, i: u32) {
        let kept = self.local.try_with(|l| {
            l.pool.set(Some(&self.pool));
            let mut f = l.free.borrow_mut();
            f.push(i);
            if f.len() > LOCAL_AT_MOST {
                lock(&self.pool).extend(f.drain(LOCAL_AT_MOST / 2..));
            }
        });
        if kept.is_err() {
            lock(&self.pool).push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle_bits::object;

    thread_local! {
        static LOCAL: Local = const { Local::new() };
    }
    static T: Table<u64> = Table::new(object::REQUEST, &LOCAL);

    #[test]
    fn a_table_names_objects_by_handles_and_reuses_freed_slots() {
        let a = T.insert(10);
        let b = T.insert(20);
        assert_ne!(a, b);
        assert_eq!((a as u32) >> 30, DIRECT);
        assert_eq!(crate::handle_bits::object_of(a), object::REQUEST);
        assert_eq!((T.with(a, |x| *x), T.with(b, |x| *x)), (Some(10), Some(20)));
        assert_eq!(T.with(crate::consts::MPI_REQUEST_NULL, |x| *x), None, "the null handle names nothing");
        assert_eq!(T.with(make(DIRECT, object::COMM, 0), |x| *x), None, "another kind's handle names nothing");
        assert_eq!(T.with_mut(b, |x| std::mem::replace(x, 21)), Some(20));
        assert_eq!(T.take_if(b, |x| *x == 0), None, "kept when the test fails");
        assert_eq!(T.take(a), Some(10));
        assert_eq!(T.with(a, |x| *x), None);
        assert_eq!(T.take(a), None, "a handle is freed once");
        assert!(T.all(&[b, 0], 0, |x| *x == 21));
        assert!(!T.all(&[b, a], 0, |_| true), "a freed handle is not live");
        assert_eq!(T.insert(30), a, "the freed slot is reused");
        // Lent: taken out frees the slot; left, it stays live.
        assert_eq!(T.lend(a, |s| s.take()), Some(Some(30)));
        assert_eq!(T.with(a, |x| *x), None);
        assert_eq!(T.lend(b, |s| s.as_ref().copied()), Some(Some(21)));
        assert_eq!(T.take(b), Some(21));
    }

    #[test]
    fn many_threads_make_and_free_handles_without_losing_any() {
        thread_local! {
            static LOCAL_U: Local = const { Local::new() };
        }
        static U: Table<(usize, usize)> = Table::new(object::REQUEST, &LOCAL_U);
        let ts: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut live = Vec::new();
                    for k in 0..5000 {
                        live.push((U.insert((t, k)), k));
                        if k % 3 == 0 {
                            let (h, k) = live.swap_remove(0);
                            assert_eq!(U.take(h), Some((t, k)));
                        }
                    }
                    for (h, k) in live {
                        assert_eq!(U.lend(h, |s| s.take()), Some(Some((t, k))));
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert!(U.is_empty());
        // The indices the threads freed went to the pool at their end and are reused.
        let n = U.next.load(Ordering::Relaxed);
        let h = U.insert((9, 9));
        assert_eq!(U.next.load(Ordering::Relaxed), n, "no fresh index while the pool has some");
        assert_eq!(U.take(h), Some((9, 9)));
    }
}
