//! Info objects: `MPI_Info_create`, `MPI_Info_create_env`, `MPI_Info_set`, `MPI_Info_get`,
//! `MPI_Info_get_string`, `MPI_Info_get_valuelen`, `MPI_Info_get_nkeys`,
//! `MPI_Info_get_nthkey`, `MPI_Info_delete`, `MPI_Info_dup`, `MPI_Info_free`. Keys and values
//! are kept in the order they were first set; the functions that take hints
//! (`MPI_Comm_dup_with_info`, ...) do not use them. `MPI_INFO_ENV` is empty.

use crate::consts::*;
use crate::handles::{object, Slab};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// `MPI_INFO_NULL`.
pub(crate) const MPI_INFO_NULL: c_int = 0x1c00_0000;
/// `MPI_INFO_ENV`.
const MPI_INFO_ENV: c_int = 0x5c00_0001;
/// `MPI_MAX_INFO_KEY`.
const MPI_MAX_INFO_KEY: usize = 255;
/// `MPI_MAX_INFO_VAL`.
const MPI_MAX_INFO_VAL: usize = 1024;

/// The info objects the program made: their (key, value) pairs.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static INFOS: Slab<Vec<(String, String)>> = Slab::new(object::INFO);

/// The pairs of info `h` (`MPI_INFO_ENV`'s: none).
fn pairs(h: c_int) -> Result<Vec<(String, String)>, c_int> {
    if h == MPI_INFO_ENV {
        return Ok(Vec::new());
    }
    INFOS.get(h).ok_or(MPI_ERR_INFO)
}

/// The value of `key` in info `h` (none for `MPI_INFO_NULL` or a key not set).
pub(crate) fn value(h: c_int, key: &str) -> Option<String> {
    pairs(h).ok()?.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A key or value argument.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn text(p: *const c_char, max: usize, class: c_int) -> Result<String, c_int> {
    if p.is_null() {
        return Err(class);
    }
    // SAFETY: non-null; the caller vouches for a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    if s.is_empty() || s.len() > max {
        return Err(class);
    }
    Ok(s)
}

/// Writes a new info handle at `out`.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn made(out: *mut c_int, v: Vec<(String, String)>) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let h = INFOS.insert(v);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(h) };
    Ok(())
}

/// Copies `s` and a NUL into `buf` of `room` bytes (cut to fit).
///
/// # Safety
/// `buf` must be valid for `room` bytes.
unsafe fn copy_out(s: &str, buf: *mut c_char, room: usize) {
    if room == 0 || buf.is_null() {
        return;
    }
    let n = s.len().min(room - 1);
    // SAFETY: `n + 1 <= room` bytes, which the caller vouches for.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

mpi_fn! {
    /// Makes an empty info object.
    fn MPI_Info_create(info: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { made(info, Vec::new()) }
    }
}

mpi_fn! {
    /// Makes an info object of the environment (empty here).
    fn MPI_Info_create_env(_argc: c_int, _argv: *mut *mut c_char, info: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { made(info, Vec::new()) }
    }
}

mpi_fn! {
    /// Sets `key` to `value` (replacing its value).
    fn MPI_Info_set(info: c_int, key: *const c_char, value: *const c_char) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for two NUL-terminated strings.
        let (k, v) = unsafe {
            (text(key, MPI_MAX_INFO_KEY, MPI_ERR_INFO_KEY)?, text(value, MPI_MAX_INFO_VAL, MPI_ERR_INFO_VALUE)?)
        };
        INFOS
            .with_mut(info, |p| match p.iter_mut().find(|(pk, _)| *pk == k) {
                Some(slot) => slot.1 = v,
                None => p.push((k, v)),
            })
            .ok_or(MPI_ERR_INFO)
    }
}

mpi_fn! {
    /// The value of `key` (at most `valuelen` bytes and a NUL), and whether it is set.
    fn MPI_Info_get(info: c_int, key: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for a NUL-terminated key.
        let k = unsafe { text(key, MPI_MAX_INFO_KEY, MPI_ERR_INFO_KEY)? };
        let found = pairs(info)?.into_iter().find(|(pk, _)| *pk == k).map(|(_, v)| v);
        if flag.is_null() || valuelen < 0 {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: `flag` checked non-null; the caller vouches for `valuelen + 1` bytes at
        // `value`.
        unsafe {
            flag.write(found.is_some() as c_int);
            if let Some(v) = found {
                copy_out(&v, value, valuelen as usize + 1);
            }
        }
        Ok(())
    }
}

mpi_fn! {
    /// The value of `key` in a buffer of `*buflen` bytes; `*buflen` becomes the value's
    /// length with its NUL, `*flag` whether it is set.
    fn MPI_Info_get_string(info: c_int, key: *const c_char, buflen: *mut c_int, value: *mut c_char, flag: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for a NUL-terminated key.
        let k = unsafe { text(key, MPI_MAX_INFO_KEY, MPI_ERR_INFO_KEY)? };
        let found = pairs(info)?.into_iter().find(|(pk, _)| *pk == k).map(|(_, v)| v);
        if flag.is_null() || buflen.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: both checked non-null; the caller vouches for `*buflen` bytes at `value`.
        unsafe {
            flag.write(found.is_some() as c_int);
            if let Some(v) = found {
                let room = buflen.read().max(0) as usize;
                copy_out(&v, value, room);
                buflen.write(v.len() as c_int + 1);
            }
        }
        Ok(())
    }
}

mpi_fn! {
    /// The length of `key`'s value (without its NUL), and whether it is set.
    fn MPI_Info_get_valuelen(info: c_int, key: *const c_char, valuelen: *mut c_int, flag: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for a NUL-terminated key.
        let k = unsafe { text(key, MPI_MAX_INFO_KEY, MPI_ERR_INFO_KEY)? };
        let found = pairs(info)?.into_iter().find(|(pk, _)| *pk == k).map(|(_, v)| v);
        if flag.is_null() || valuelen.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: both checked non-null; the caller vouches they are writable.
        unsafe {
            flag.write(found.is_some() as c_int);
            if let Some(v) = found {
                valuelen.write(v.len() as c_int);
            }
        }
        Ok(())
    }
}

mpi_fn! {
    /// The number of keys set.
    fn MPI_Info_get_nkeys(info: c_int, nkeys: *mut c_int) on MPI_COMM_WORLD => {
        let n = pairs(info)?.len() as c_int;
        // SAFETY: the caller's contract.
        unsafe { crate::put(nkeys, n) }
    }
}

mpi_fn! {
    /// The `n`-th key (in the order they were first set).
    fn MPI_Info_get_nthkey(info: c_int, n: c_int, key: *mut c_char) on MPI_COMM_WORLD => {
        let p = pairs(info)?;
        let k = usize::try_from(n).ok().and_then(|n| p.get(n)).ok_or(MPI_ERR_ARG)?;
        if key.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for `MPI_MAX_INFO_KEY + 1` bytes at `key`.
        unsafe { copy_out(&k.0, key, MPI_MAX_INFO_KEY + 1) };
        Ok(())
    }
}

mpi_fn! {
    /// Removes `key` (`MPI_ERR_INFO_NOKEY` if it is not set).
    fn MPI_Info_delete(info: c_int, key: *const c_char) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for a NUL-terminated key.
        let k = unsafe { text(key, MPI_MAX_INFO_KEY, MPI_ERR_INFO_KEY)? };
        INFOS
            .with_mut(info, |p| {
                let before = p.len();
                p.retain(|(pk, _)| *pk != k);
                p.len() < before
            })
            .ok_or(MPI_ERR_INFO)?
            .then_some(())
            .ok_or(MPI_ERR_INFO_NOKEY)
    }
}

mpi_fn! {
    /// A copy of an info object.
    fn MPI_Info_dup(info: c_int, newinfo: *mut c_int) on MPI_COMM_WORLD => {
        let p = pairs(info)?;
        // SAFETY: the caller's contract.
        unsafe { made(newinfo, p) }
    }
}

mpi_fn! {
    /// Frees an info object and sets it to `MPI_INFO_NULL`.
    fn MPI_Info_free(info: *mut c_int) on MPI_COMM_WORLD => {
        if info.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { info.read() };
        INFOS.take(h).ok_or(MPI_ERR_INFO)?;
        // SAFETY: as above.
        unsafe { info.write(MPI_INFO_NULL) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> std::ffi::CString {
        std::ffi::CString::new(s).unwrap()
    }

    #[test]
    fn keys_keep_their_order_and_last_value_and_copies_are_apart() {
        let (mut i, mut d, mut n, mut flag, mut len) = (0, 0, 0, 0, 0);
        let mut buf = [0 as c_char; 64];
        // SAFETY: locals and NUL-terminated strings.
        unsafe {
            assert_eq!(MPI_Info_create(&mut i), MPI_SUCCESS);
            assert_eq!(MPI_Info_set(i, c("b").as_ptr(), c("one").as_ptr()), MPI_SUCCESS);
            assert_eq!(MPI_Info_set(i, c("a").as_ptr(), c("two").as_ptr()), MPI_SUCCESS);
            assert_eq!(MPI_Info_set(i, c("b").as_ptr(), c("three").as_ptr()), MPI_SUCCESS);
            assert_eq!(MPI_Info_get_nkeys(i, &mut n), MPI_SUCCESS);
            assert_eq!(n, 2);
            assert_eq!(MPI_Info_get_nthkey(i, 0, buf.as_mut_ptr()), MPI_SUCCESS);
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str(), Ok("b"));
            assert_eq!(MPI_Info_get(i, c("b").as_ptr(), 3, buf.as_mut_ptr(), &mut flag), MPI_SUCCESS);
            assert_eq!((flag, CStr::from_ptr(buf.as_ptr()).to_str()), (1, Ok("thr")), "cut to valuelen");
            assert_eq!(MPI_Info_get_valuelen(i, c("b").as_ptr(), &mut len, &mut flag), MPI_SUCCESS);
            assert_eq!(len, 5);
            assert_eq!(MPI_Info_dup(i, &mut d), MPI_SUCCESS);
            assert_eq!(MPI_Info_delete(i, c("a").as_ptr()), MPI_SUCCESS);
            assert_eq!(MPI_Info_get(i, c("a").as_ptr(), 10, buf.as_mut_ptr(), &mut flag), MPI_SUCCESS);
            assert_eq!(flag, 0);
            let mut room = 64;
            assert_eq!(MPI_Info_get_string(d, c("a").as_ptr(), &mut room, buf.as_mut_ptr(), &mut flag), MPI_SUCCESS);
            assert_eq!((flag, room, CStr::from_ptr(buf.as_ptr()).to_str()), (1, 4, Ok("two")), "the copy kept it");
            assert_eq!(MPI_Info_free(&mut i), MPI_SUCCESS);
            assert_eq!(MPI_Info_free(&mut d), MPI_SUCCESS);
            assert_eq!((i, d), (MPI_INFO_NULL, MPI_INFO_NULL));
            assert_eq!(MPI_Info_get_nkeys(MPI_INFO_ENV, &mut n), MPI_SUCCESS);
            assert_eq!(n, 0);
        }
    }
}
