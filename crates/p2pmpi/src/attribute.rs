//! Communicator attributes (rsmpi's `mpi::attribute`), with MPI's keys and callbacks.
//!
//! A value of any type implementing [`CommAttribute`] can be attached to a communicator
//! under its type's key and read back with `get_attr`/`set_attr`
//! ([`crate::topology::AnyCommunicator`]). As in MPI, every key has two callbacks with C
//! signatures, which a type may override ([`CommAttribute::comm_copy_attr_fn`],
//! [`CommAttribute::comm_delete_attr_fn`]):
//! - the **copy** callback runs for every attribute of a communicator being duplicated
//!   (`duplicate`, `MPI_Comm_dup`) and says by its flag whether the duplicate gets a value,
//!   and which (the default: a clone when `CLONE_ON_DUP`, else none);
//! - the **delete** callback runs when a value goes away: replaced by `set_attr` /
//!   `MPI_Comm_set_attr`, removed by `MPI_Comm_delete_attr`, or when its communicator is freed
//!   (the last Rust object and handle of it dropped, or `MPI_Comm_free`). The world's
//!   attributes are never freed (the world lives as long as the process).
//!
//! Unlike rsmpi, attribute types must be `Send + Sync` (a communicator may be used from any
//! thread). The default delete callback keeps a replaced or removed value until its
//! communicator is freed (another Rust handle of the same communicator, e.g. a second
//! `universe.world()`, may still hold a reference from `get_attr`); at the communicator's
//! free it drops the value. An overridden delete callback that frees the value at once must
//! make sure no such reference remains.
//!
//! Values are stored under their type's [`AttributeKey`] ([`CommAttribute::get_key`]): by
//! default one key per type, made on first use like `MPI_Comm_create_keyval` with the type's
//! callbacks. A type that overrides `get_key` shares its slot with every type returning the
//! same key; reading it as another type gives `None`. A value stored under a key that was
//! not made by `MPI_Comm_create_keyval` (e.g. `AttributeKey::new_unchecked(k)`) uses the
//! callbacks of its own type.

use crate::handles::{MPI_Comm, MPI_Comm_copy_attr_function, MPI_Comm_delete_attr_function};
use crate::raw::AsRaw;
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{LazyLock, Mutex};

/// The key of an attribute type (rsmpi's wrapper of an MPI keyval), from
/// [`CommAttribute::get_key`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttributeKey(i32);

impl AttributeKey {
    /// A key chosen by the program, for an overridden [`CommAttribute::get_key`] (e.g. one
    /// made by `mpi::ffi::MPI_Comm_create_keyval`).
    ///
    /// # Safety
    ///
    /// Nothing here can go wrong with any value; the function is `unsafe` as in rsmpi, where
    /// the key must be a valid MPI keyval. Keys from 1 to 2^30 are handed out by
    /// `MPI_Comm_create_keyval` and the default `get_key`: choose others to keep a slot of
    /// your own, or use one made by `MPI_Comm_create_keyval`.
    pub unsafe fn new_unchecked(k: i32) -> Self {
        AttributeKey(k)
    }

    /// The key's number.
    pub fn value(&self) -> i32 {
        self.0
    }
}

// SAFETY: the key's number is the raw keyval.
unsafe impl AsRaw for AttributeKey {
    type Raw = c_int;
    fn as_raw(&self) -> c_int {
        self.0
    }
}

/// The callbacks of a key, and its extra state (`MPI_Comm_create_keyval`).
#[derive(Clone, Copy)]
pub(crate) struct Callbacks {
    copy: MPI_Comm_copy_attr_function,
    delete: MPI_Comm_delete_attr_function,
    extra: *mut c_void,
}

// SAFETY: the extra state is the program's pointer, only handed back to its callbacks (as
// in MPI, where any thread may run them).
unsafe impl Send for Callbacks {}

// Process-wide because keyvals are C handles (plain integers) that a program may create before
// `initialize` and use from any thread (the C handle tables).
pub(crate) static KEYVALS: LazyLock<Mutex<HashMap<i32, Callbacks>>> = LazyLock::new(Default::default);
static NEXT_KEY: AtomicI32 = AtomicI32::new(1);

pub(crate) use crate::handles::lock;

pub(crate) fn create_keyval(
    copy: MPI_Comm_copy_attr_function,
    delete: MPI_Comm_delete_attr_function,
    extra: *mut c_void,
) -> i32 {
    let k = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    lock(&KEYVALS).insert(k, Callbacks { copy, delete, extra });
    k
}

thread_local! {
    /// While the library runs a delete callback for a replaced or removed value: where the
    /// default callback puts the value (it is dropped with its communicator).
    // Per thread because only the thread that runs a delete callback puts values here, while
    // it runs it.
    static RETIRED: RefCell<Option<Vec<Box<dyn Any + Send + Sync>>>> = const { RefCell::new(None) };
}

/// The default delete callback's work: drops the value, or keeps it for the communicator's
/// free when it is replaced or removed.
///
/// # Safety
/// `val` must come from `Box::into_raw` of a `Box<A>`, and not be used afterwards.
unsafe fn release<A: CommAttribute>(val: *mut c_void) {
    // SAFETY: per the contract, the value is a leaked `Box<A>` owned by this call.
    let b = unsafe { Box::from_raw(val as *mut A) };
    let kept = RETIRED.with(|r| match r.borrow_mut().as_mut() {
        Some(v) => {
            v.push(b);
            None
        }
        None => Some(b),
    });
    drop(kept);
}

/// A type that can be attached to a communicator as an attribute.
pub trait CommAttribute
where
    Self: 'static + Sized + Clone + Send + Sync,
{
    /// Whether the default copy callback gives a duplicate a clone of the value.
    const CLONE_ON_DUP: bool = false;

    /// Called when a value of this type goes away (replaced, removed, or its communicator
    /// freed), with the communicator, the key, the value (a `*mut Self` from
    /// `Box::into_raw`, unless set with `MPI_Comm_set_attr`) and the key's extra state.
    /// Returns `MPI_SUCCESS`, or an error code (then the call that removed it returns it).
    ///
    /// The default drops the value (keeping it until the communicator is freed when it was
    /// replaced or removed, see the module's documentation).
    ///
    /// # Safety
    ///
    /// Called by the library with a value stored by `set_attr` (a `Box<Self>`).
    unsafe extern "C" fn comm_delete_attr_fn(
        _comm: MPI_Comm,
        _key: c_int,
        val: *mut c_void,
        _extra_state: *mut c_void,
    ) -> c_int {
        // SAFETY: the library passes a value stored by `set_attr::<Self>`, a `Box<Self>`
        // it gives up.
        unsafe { release::<Self>(val) };
        crate::handles::MPI_SUCCESS as c_int
    }

    /// Called for a value of this type when its communicator is duplicated, with the old
    /// communicator, the key, its extra state, the value, where to write the duplicate's
    /// value (a `*mut *mut c_void`) and a flag to set to 1 if the duplicate gets one (0
    /// otherwise). Returns `MPI_SUCCESS` or an error code (the duplication then fails).
    ///
    /// The default writes a boxed clone when `CLONE_ON_DUP`.
    ///
    /// # Safety
    ///
    /// Called by the library with a value stored by `set_attr` (a `Box<Self>`), a writable
    /// `val_out` and `flag`.
    unsafe extern "C" fn comm_copy_attr_fn(
        _old_comm: MPI_Comm,
        _key: c_int,
        _extra_state: *mut c_void,
        val_in: *mut c_void,
        val_out: *mut c_void,
        flag: *mut c_int,
    ) -> c_int {
        if Self::CLONE_ON_DUP {
            // SAFETY: `val_in` is a live `Box<Self>`'s value (only read here).
            let copy = Box::new(unsafe { &*(val_in as *const Self) }.clone());
            // SAFETY: the library passes a writable `*mut *mut c_void` and flag.
            unsafe {
                *(val_out as *mut *mut c_void) = Box::into_raw(copy) as *mut c_void;
                *flag = 1;
            }
        } else {
            // SAFETY: as above.
            unsafe { *flag = 0 };
        }
        crate::handles::MPI_SUCCESS as c_int
    }

    /// The key this type's values are stored under: by default one of its own, made on
    /// first use with this type's callbacks, the same for the whole run. Override it to
    /// share a slot between types, or to use a key made by `MPI_Comm_create_keyval`.
    fn get_key() -> AttributeKey {
        // Process-wide because a type's key is a keyval (a C handle) kept for the whole run.
        static KEYS: LazyLock<Mutex<HashMap<TypeId, i32>>> = LazyLock::new(Default::default);
        let mut keys = lock(&KEYS);
        let k = *keys.entry(TypeId::of::<Self>()).or_insert_with(|| {
            create_keyval(Some(Self::comm_copy_attr_fn), Some(Self::comm_delete_attr_fn), std::ptr::null_mut())
        });
        AttributeKey(k)
    }
}

/// Re-exports for `use mpi::attribute::traits::*`.
pub mod traits {
    pub use super::CommAttribute;
}

/// One stored value.
pub(crate) struct Value {
    pub(crate) ptr: *mut c_void,
    /// The Rust type of the value (`None`: set through `MPI_Comm_set_attr`).
    pub(crate) type_id: Option<TypeId>,
    pub(crate) callbacks: Callbacks,
}

/// The attributes of one communicator.
#[derive(Default)]
pub(crate) struct Attributes {
    pub(crate) values: HashMap<i32, Value>,
    /// Values removed while the communicator lives, dropped with it.
    retired: Vec<Box<dyn Any + Send + Sync>>,
}

// SAFETY: the values are `Send + Sync` Rust values (the trait's bounds) or the program's
// pointers set through `MPI_Comm_set_attr`, only handed back to it; callbacks are C
// function pointers.
unsafe impl Send for Attributes {}
// SAFETY: as above; shared access only reads the values.
unsafe impl Sync for Attributes {}

impl Attributes {
    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl std::fmt::Debug for Attributes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Attributes({})", self.values.len())
    }
}

/// A communicator's attributes as seen here: their table, and how to name the communicator
/// by a handle for the callbacks (registering it only when a callback runs). The
/// communicator (`topology`) keeps the table; this module knows no communicator.
pub(crate) struct Holder<'a, F: Fn() -> MPI_Comm> {
    pub(crate) attrs: &'a parking_lot::Mutex<Attributes>,
    pub(crate) comm: F,
}

/// Runs a delete callback on a removed value; a value the default callback keeps is added to
/// the communicator's retired ones.
pub(crate) fn delete_value<F: Fn() -> MPI_Comm>(h: &Holder<'_, F>, key: i32, v: Value) -> c_int {
    let Some(f) = v.callbacks.delete else { return crate::handles::MPI_SUCCESS as c_int };
    let comm = (h.comm)();
    RETIRED.with(|r| *r.borrow_mut() = Some(Vec::new()));
    // SAFETY: the value was stored with these callbacks, which the program (or the
    // attribute type) vouched for; it is removed from the communicator, so this is its
    // only deletion.
    let code = unsafe { f(comm, key, v.ptr, v.callbacks.extra) };
    let kept = RETIRED.with(|r| r.borrow_mut().take()).unwrap_or_default();
    h.attrs.lock().retired.extend(kept);
    code
}

/// Stores a value under `key`, running the delete callback of the value it replaces.
pub(crate) fn store<F: Fn() -> MPI_Comm>(h: &Holder<'_, F>, key: i32, v: Value) -> c_int {
    let old = h.attrs.lock().values.insert(key, v);
    old.map_or(crate::handles::MPI_SUCCESS as c_int, |o| delete_value(h, key, o))
}

/// `set_attr`.
pub(crate) fn set<A: CommAttribute, F: Fn() -> MPI_Comm>(h: &Holder<'_, F>, val: A) {
    let key = A::get_key().0;
    let callbacks = lock(&KEYVALS).get(&key).copied().unwrap_or(Callbacks {
        copy: Some(A::comm_copy_attr_fn),
        delete: Some(A::comm_delete_attr_fn),
        extra: std::ptr::null_mut(),
    });
    let ptr = Box::into_raw(Box::new(val)) as *mut c_void;
    let code = store(h, key, Value { ptr, type_id: Some(TypeId::of::<A>()), callbacks });
    assert_eq!(code, 0, "an attribute's delete callback failed (code {code}) when set_attr replaced it");
}

/// `get_attr`: the value of type `A`, if the key of `A` holds one.
pub(crate) fn get<A: CommAttribute>(attrs: &parking_lot::Mutex<Attributes>) -> Option<*const A> {
    let attrs = attrs.lock();
    let v = attrs.values.get(&A::get_key().0)?;
    (v.type_id == Some(TypeId::of::<A>())).then_some(v.ptr as *const A)
}

/// The attributes a duplicate of `h` gets, by the copy callbacks.
pub(crate) fn for_duplicate<F: Fn() -> MPI_Comm>(h: &Holder<'_, F>) -> Attributes {
    let snapshot: Vec<(i32, *mut c_void, Option<TypeId>, Callbacks)> =
        h.attrs.lock().values.iter().map(|(&k, v)| (k, v.ptr, v.type_id, v.callbacks)).collect();
    let mut out = Attributes::default();
    if snapshot.is_empty() {
        return out;
    }
    let comm = (h.comm)();
    for (key, ptr, type_id, callbacks) in snapshot {
        let Some(copy) = callbacks.copy else { continue };
        let mut new: *mut c_void = std::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: the value is alive in `h` (held by the caller) and was stored with these
        // callbacks; `new` and `flag` are live locals.
        let code =
            unsafe { copy(comm, key, callbacks.extra, ptr, &mut new as *mut *mut c_void as *mut c_void, &mut flag) };
        assert_eq!(code, 0, "the copy callback of attribute key {key} failed (code {code}) in a duplication");
        if flag != 0 {
            out.values.insert(key, Value { ptr: new, type_id, callbacks });
        }
    }
    out
}

/// Runs the delete callbacks of every value of a communicator being freed (`comm` names it
/// for the callbacks).
pub(crate) fn free_all(attrs: &mut Attributes, comm: MPI_Comm) {
    for (key, v) in attrs.values.drain() {
        if let Some(f) = v.callbacks.delete {
            // SAFETY: as in `delete_value`; the communicator is being freed, so this is the
            // value's only deletion and nothing can borrow it any more.
            let code = unsafe { f(comm, key, v.ptr, v.callbacks.extra) };
            if code != 0 {
                eprintln!("p2pmpi: the delete callback of attribute key {key} failed (code {code})");
            }
        }
    }
}
