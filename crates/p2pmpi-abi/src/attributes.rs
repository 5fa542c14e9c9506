//! Attributes of communicators: `MPI_Comm_create_keyval`, `MPI_Comm_free_keyval`,
//! `MPI_Comm_set_attr`, `MPI_Comm_get_attr`, `MPI_Comm_delete_attr` (and MPI-1's names
//! `MPI_Keyval_create`, `MPI_Keyval_free`, `MPI_Attr_put`, `MPI_Attr_get`,
//! `MPI_Attr_delete`), the predefined attributes (`MPI_TAG_UB`, `MPI_HOST`, `MPI_IO`,
//! `MPI_WTIME_IS_GLOBAL`, `MPI_UNIVERSE_SIZE`, `MPI_LASTUSEDCODE`, `MPI_APPNUM`) and
//! `MPIR_Dup_fn` (MPICH's `MPI_COMM_DUP_FN`).
//!
//! The attributes live here, keyed by MPICH's handles, so that the callbacks get MPICH's
//! handles: copied by the keys' copy callbacks when a communicator is duplicated
//! ([`copy_all`]), deleted by their delete callbacks when it is freed ([`delete_all`]) and,
//! for `MPI_COMM_SELF`, at `MPI_Finalize`. Callbacks run outside every lock (they may call
//! MPI). Attributes of datatypes (`MPI_Type_create_keyval`, `MPI_Type_free_keyval`,
//! `MPI_Type_set_attr`, `MPI_Type_get_attr`, `MPI_Type_delete_attr`) share the table: a
//! datatype's handle never equals a communicator's; `MPI_Type_dup` copies them and
//! `MPI_Type_free` deletes them. So do attributes of windows (`MPI_Win_create_keyval`,
//! `MPI_Win_free_keyval`; `MPI_Win_set_attr`, `MPI_Win_get_attr`, `MPI_Win_delete_attr` are
//! [`crate::rma`]'s, the window checked there), deleted by `MPI_Win_free`.

use crate::consts::*;
use crate::handles::{comm, object, Slab};
use p2pmpi::ffi;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};

/// A copy callback (`MPI_Comm_copy_attr_function`).
pub type CopyFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// A delete callback (`MPI_Comm_delete_attr_function`).
pub type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// A copy callback's caller for another language (`MPII_Keyval_set_proxy`, by which the C++
/// bindings call their callbacks): `(callback, object, key, extra state, kind of value,
/// value, copy out, flag out)`.
pub type CopyProxy =
    unsafe extern "C" fn(CopyFn, c_int, c_int, *mut c_void, c_int, *mut c_void, *mut *mut c_void, *mut c_int) -> c_int;
/// A delete callback's caller for another language: `(callback, object, key, kind of value,
/// value, extra state)`.
pub type DeleteProxy = unsafe extern "C" fn(DeleteFn, c_int, c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// MPICH's kind of an attribute value set from C (a pointer).
const ATTR_PTR: c_int = 0;

/// A key: its callbacks (none: `MPI_COMM_NULL_COPY_FN`, `MPI_COMM_NULL_DELETE_FN`), the
/// state they are given, and the callers of the callbacks of another language.
#[derive(Clone, Copy)]
pub struct Keyval {
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    extra: usize,
    proxy: Option<(CopyProxy, DeleteProxy)>,
}

/// Makes the callbacks of key `key` called through `copy` and `delete`
/// (`MPII_Keyval_set_proxy`); `false` if `key` names no key.
pub fn set_proxy(key: c_int, copy: CopyProxy, delete: DeleteProxy) -> bool {
    KEYVALS.with_mut(key, |k| k.proxy = Some((copy, delete))).is_some()
}

/// The keys made by the program.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static KEYVALS: Slab<Keyval> = Slab::new(object::KEYVAL);

/// The attributes: `(communicator, key)` → (value, the key's callbacks when it was set). The
/// callbacks stay with the attribute, so freeing the key does not change how it is deleted.
// Process-wide, as above.
static ATTRS: Mutex<BTreeMap<(c_int, c_int), (usize, Keyval)>> = Mutex::new(BTreeMap::new());

/// The predefined keys and their values (addresses of `int`s that live for the whole run).
fn predefined(key: c_int) -> Option<*mut c_void> {
    static TAG_UB: c_int = c_int::MAX;
    static HOST: c_int = MPI_PROC_NULL;
    static IO: c_int = MPI_ANY_SOURCE;
    static WTIME_IS_GLOBAL: c_int = 0;
    let fixed: Option<&'static c_int> = match key {
        MPI_TAG_UB => Some(&TAG_UB),
        MPI_HOST => Some(&HOST),
        MPI_IO => Some(&IO),
        MPI_WTIME_IS_GLOBAL => Some(&WTIME_IS_GLOBAL),
        _ => None,
    };
    if let Some(p) = fixed {
        return Some(p as *const c_int as *mut c_void);
    }
    if key == MPI_LASTUSEDCODE {
        // An `AtomicI32` has an `int`'s layout; the program reads it as one.
        return Some(crate::errors::LAST_USED_CODE.as_ptr() as *mut c_void);
    }
    // The library keeps these two (the launcher tells them).
    let theirs = match key {
        MPI_UNIVERSE_SIZE => ffi::MPI_UNIVERSE_SIZE as c_int,
        MPI_APPNUM => ffi::MPI_APPNUM as c_int,
        _ => return None,
    };
    let (mut p, mut flag): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
    // SAFETY: the predefined world; `p` and `flag` are locals.
    let world = unsafe { ffi::RSMPI_COMM_WORLD };
    // SAFETY: as above.
    let rc = unsafe { ffi::MPI_Comm_get_attr(world, theirs, &mut p as *mut *mut c_void as *mut c_void, &mut flag) };
    (rc == MPI_SUCCESS && flag != 0).then_some(p)
}

const MPI_TAG_UB: c_int = 0x6440_0001;
const MPI_HOST: c_int = 0x6440_0003;
const MPI_IO: c_int = 0x6440_0005;
const MPI_WTIME_IS_GLOBAL: c_int = 0x6440_0007;
const MPI_UNIVERSE_SIZE: c_int = 0x6440_0009;
const MPI_LASTUSEDCODE: c_int = 0x6440_000b;
const MPI_APPNUM: c_int = 0x6440_000d;
const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;

/// Runs the delete callback of an attribute taken out of the table.
fn delete(c: c_int, key: c_int, value: usize, kv: Keyval) -> Result<(), c_int> {
    let (v, extra) = (value as *mut c_void, kv.extra as *mut c_void);
    match (kv.delete, kv.proxy) {
        // SAFETY: the program's callback through its language's caller, as MPICH calls it.
        (Some(f), Some((_, p))) => crate::ok(unsafe { p(f, c, key, ATTR_PTR, v, extra) }),
        // SAFETY: the program's callback, with the arguments the standard gives it.
        (Some(f), None) => crate::ok(unsafe { f(c, key, v, extra) }),
        (None, _) => Ok(()),
    }
}

/// Deletes every attribute of communicator `c` (it is being freed), in the reverse order of
/// their keys' creation; the first failed callback's code.
pub fn delete_all(c: c_int) -> Result<(), c_int> {
    let mine: Vec<((c_int, c_int), (usize, Keyval))> = {
        let mut a = ATTRS.lock();
        let keys: Vec<(c_int, c_int)> = a.range((c, c_int::MIN)..=(c, c_int::MAX)).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| a.remove(&k).map(|v| (k, v))).collect()
    };
    let mut r = Ok(());
    for ((_, key), (value, kv)) in mine.into_iter().rev() {
        let d = delete(c, key, value, kv);
        if r.is_ok() {
            r = d;
        }
    }
    r
}

/// Copies the attributes of `old` to `new` (just duplicated) by their copy callbacks.
pub fn copy_all(old: c_int, new: c_int) -> Result<(), c_int> {
    let theirs: Vec<(c_int, usize, Keyval)> = ATTRS
        .lock()
        .range((old, c_int::MIN)..=(old, c_int::MAX))
        .map(|((_, key), (value, kv))| (*key, *value, *kv))
        .collect();
    for (key, value, kv) in theirs {
        let Some(f) = kv.copy else { continue };
        let (mut out, mut flag): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
        let (extra, v) = (kv.extra as *mut c_void, value as *mut c_void);
        // SAFETY: the program's callback (through its language's caller, as MPICH calls it),
        // with the arguments the standard gives it; `out` and `flag` are locals.
        let rc = unsafe {
            match kv.proxy {
                Some((p, _)) => p(f, old, key, extra, ATTR_PTR, v, &mut out, &mut flag),
                None => f(old, key, extra, v, &mut out as *mut *mut c_void as *mut c_void, &mut flag),
            }
        };
        crate::ok(rc)?;
        if flag != 0 {
            ATTRS.lock().insert((new, key), (out as usize, kv));
        }
    }
    Ok(())
}

/// `MPI_COMM_DUP_FN`: the copy is the same value.
///
/// # Safety
/// `attribute_val_out` must be valid for a pointer's write and `flag` for an `int`'s.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldcomm: c_int,
    _keyval: c_int,
    _extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        (attribute_val_out as *mut *mut c_void).write(attribute_val_in);
        flag.write(1);
    }
    MPI_SUCCESS
}

/// Makes a key.
///
/// # Safety
/// `keyval` must be null or valid for a write.
pub(crate) unsafe fn create(
    copy: Option<CopyFn>,
    del: Option<DeleteFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> Result<(), c_int> {
    if keyval.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let h = KEYVALS.insert(Keyval { copy, delete: del, extra: extra as usize, proxy: None });
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { keyval.write(h) };
    Ok(())
}

/// Frees a key (the attributes set with it keep their callbacks).
///
/// # Safety
/// `keyval` must be null or valid for a read and a write.
pub(crate) unsafe fn free(keyval: *mut c_int) -> Result<(), c_int> {
    if keyval.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches for it.
    let h = unsafe { keyval.read() };
    KEYVALS.take(h).ok_or(MPI_ERR_KEYVAL)?;
    // SAFETY: as above.
    unsafe { keyval.write(MPI_KEYVAL_INVALID) };
    Ok(())
}

/// The kind of object an attribute is set on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum On {
    Comm,
    Type,
    Win,
}

/// Whether `h` is MPICH's handle of a predefined datatype: built-in (`0x4c......`) or a pair
/// type of the `MPI_FLOAT_INT` family (`0x8c00000.`).
fn predefined_type(h: c_int) -> bool {
    let h = h as u32;
    h & 0xfc00_0000 == 0x4c00_0000 || (0x8c00_0000..=0x8c00_0007).contains(&h)
}

/// Checks that `h` names an object of kind `on`.
fn check(h: c_int, on: On) -> Result<(), c_int> {
    match on {
        // A predefined datatype the library does not describe yet (`MPI_REAL16`, ...)
        // still holds attributes: it is one by its handle's encoding.
        On::Type => {
            crate::datatypes::any_datatype(h).map(|_| ()).or_else(|e| predefined_type(h).then_some(()).ok_or(e))
        }
        On::Comm => comm(h).map(|_| ()),
        // Checked by the caller: the window functions are [`crate::rma`]'s (above this module).
        On::Win => Ok(()),
    }
}

/// Sets attribute `key` of `c` to `value` (deleting the one it replaces).
pub(crate) fn set(c: c_int, key: c_int, value: *mut c_void, on: On) -> Result<(), c_int> {
    check(c, on)?;
    let kv = KEYVALS.get(key).ok_or(MPI_ERR_KEYVAL)?;
    let old = ATTRS.lock().insert((c, key), (value as usize, kv));
    match old {
        Some((v, okv)) => delete(c, key, v, okv),
        None => Ok(()),
    }
}

/// Reads attribute `key` of `c`: `*value` (a `void *` written through `void *`) and
/// `*flag`.
///
/// # Safety
/// `value` must be valid for a pointer's write and `flag` for an `int`'s.
pub(crate) unsafe fn get(c: c_int, key: c_int, value: *mut c_void, flag: *mut c_int, on: On) -> Result<(), c_int> {
    check(c, on)?;
    if value.is_null() || flag.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let found = match predefined(key).filter(|_| on == On::Comm) {
        Some(p) => Some(p),
        None if KEYVALS.get(key).is_none() => return Err(MPI_ERR_KEYVAL),
        None => ATTRS.lock().get(&(c, key)).map(|(v, _)| *v as *mut c_void),
    };
    // SAFETY: both checked non-null; the caller vouches they are writable.
    unsafe {
        flag.write(found.is_some() as c_int);
        if let Some(p) = found {
            (value as *mut *mut c_void).write(p);
        }
    }
    Ok(())
}

/// Deletes attribute `key` of `c` by its delete callback (nothing if it is not set).
pub(crate) fn delete_one(c: c_int, key: c_int, on: On) -> Result<(), c_int> {
    check(c, on)?;
    if on == On::Comm && predefined(key).is_some() {
        return Err(MPI_ERR_KEYVAL);
    }
    let old = ATTRS.lock().remove(&(c, key));
    match old {
        Some((v, kv)) => delete(c, key, v, kv),
        None if KEYVALS.get(key).is_none() => Err(MPI_ERR_KEYVAL),
        None => Ok(()),
    }
}

mpi_fn! {
    /// Makes a key for attributes of communicators.
    fn MPI_Comm_create_keyval(copy: Option<CopyFn>, del: Option<DeleteFn>, keyval: *mut c_int, extra: *mut c_void)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create(copy, del, keyval, extra) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_create_keyval`.
    fn MPI_Keyval_create(copy: Option<CopyFn>, del: Option<DeleteFn>, keyval: *mut c_int, extra: *mut c_void)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create(copy, del, keyval, extra) }
    }
}

mpi_fn! {
    /// Frees a key and sets it to `MPI_KEYVAL_INVALID`.
    fn MPI_Comm_free_keyval(keyval: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(keyval) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_free_keyval`.
    fn MPI_Keyval_free(keyval: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(keyval) }
    }
}

mpi_fn! {
    /// Sets an attribute of `comm`.
    fn MPI_Comm_set_attr(c: c_int, key: c_int, value: *mut c_void) on c => set(c, key, value, On::Comm)
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_set_attr`.
    fn MPI_Attr_put(c: c_int, key: c_int, value: *mut c_void) on c => set(c, key, value, On::Comm)
}

mpi_fn! {
    /// Reads an attribute of `comm` (`*flag` 0 if it is not set).
    fn MPI_Comm_get_attr(c: c_int, key: c_int, value: *mut c_void, flag: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { get(c, key, value, flag, On::Comm) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_get_attr`.
    fn MPI_Attr_get(c: c_int, key: c_int, value: *mut c_void, flag: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { get(c, key, value, flag, On::Comm) }
    }
}

mpi_fn! {
    /// Deletes an attribute of `comm` by its delete callback.
    fn MPI_Comm_delete_attr(c: c_int, key: c_int) on c => delete_one(c, key, On::Comm)
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_delete_attr`.
    fn MPI_Attr_delete(c: c_int, key: c_int) on c => delete_one(c, key, On::Comm)
}

mpi_fn! {
    /// Makes a key for attributes of datatypes.
    fn MPI_Type_create_keyval(copy: Option<CopyFn>, del: Option<DeleteFn>, keyval: *mut c_int, extra: *mut c_void)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create(copy, del, keyval, extra) }
    }
}

mpi_fn! {
    /// Frees a key of datatypes' attributes and sets it to `MPI_KEYVAL_INVALID`.
    fn MPI_Type_free_keyval(keyval: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(keyval) }
    }
}

mpi_fn! {
    /// Sets an attribute of `datatype`.
    fn MPI_Type_set_attr(t: c_int, key: c_int, value: *mut c_void) on MPI_COMM_WORLD => set(t, key, value, On::Type)
}

mpi_fn! {
    /// Reads an attribute of `datatype` (`*flag` 0 if it is not set).
    fn MPI_Type_get_attr(t: c_int, key: c_int, value: *mut c_void, flag: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { get(t, key, value, flag, On::Type) }
    }
}

mpi_fn! {
    /// Deletes an attribute of `datatype` by its delete callback.
    fn MPI_Type_delete_attr(t: c_int, key: c_int) on MPI_COMM_WORLD => delete_one(t, key, On::Type)
}

mpi_fn! {
    /// Makes a key for attributes of windows.
    fn MPI_Win_create_keyval(copy: Option<CopyFn>, del: Option<DeleteFn>, keyval: *mut c_int, extra: *mut c_void)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create(copy, del, keyval, extra) }
    }
}

mpi_fn! {
    /// Frees a key of windows' attributes and sets it to `MPI_KEYVAL_INVALID`.
    fn MPI_Win_free_keyval(keyval: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(keyval) }
    }
}
