//! General active target synchronization of windows: `MPI_Win_post`, `MPI_Win_start`,
//! `MPI_Win_complete`, `MPI_Win_wait` and `MPI_Win_test`, by notices on the window's
//! private communicator. A target's `MPI_Win_post` sends a notice (tag
//! [`TAG_POST`]) to each origin of its group; an origin's `MPI_Win_start` waits for the
//! notice of each target of its group; its `MPI_Win_complete` waits until every operation
//! of the epoch was applied (a flush), then sends each target a notice (tag [`TAG_DONE`]);
//! the target's `MPI_Win_wait` waits for the notice of each origin, `MPI_Win_test` takes
//! those that came and tells whether all did. Epochs are not checked (a start without a
//! matching post waits for it).

use crate::consts::*;
use crate::datatypes::predefined;
use crate::datatypes::values::MPI_BYTE;
use crate::handles::group;
use crate::ok;
use crate::rma::{errc, flush, win, Win, TAG_DONE, TAG_POST};
use p2pmpi::ffi;
use std::os::raw::{c_int, c_void};

/// The ranks in window `w` of group `g`'s members (`MPI_ERR_GROUP` if one is not a member).
fn ranks_of(w: &Win, g: c_int) -> Result<Vec<c_int>, c_int> {
    let fg = group(g)?;
    let mut n = 0;
    // SAFETY: a local.
    ok(unsafe { ffi::MPI_Group_size(fg, &mut n) })?;
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let mut wg = unsafe { ffi::RSMPI_GROUP_NULL };
    // SAFETY: a local; the private communicator lives while the window does.
    ok(unsafe { ffi::MPI_Comm_group(w.raw, &mut wg) })?;
    let mine: Vec<c_int> = (0..n).collect();
    let mut theirs = vec![MPI_UNDEFINED; n as usize];
    // SAFETY: both arrays hold `n` ranks; `wg` is freed right after.
    let rc = unsafe {
        let rc = ffi::MPI_Group_translate_ranks(fg, n, mine.as_ptr(), wg, theirs.as_mut_ptr());
        ffi::MPI_Group_free(&mut wg);
        rc
    };
    ok(rc)?;
    if theirs.iter().any(|&r| r < 0) {
        return Err(MPI_ERR_GROUP);
    }
    Ok(theirs)
}

/// A notice of nothing.
fn nothing() -> *mut c_void {
    std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut c_void
}

/// Receives the notice `tag` from `from` on `w`.
fn receive(w: &Win, from: c_int, tag: c_int) -> Result<(), c_int> {
    let bytes = predefined(MPI_BYTE).ok_or(MPI_ERR_INTERN)?;
    // SAFETY: a receive of no data; the private communicator lives while the window does.
    ok(unsafe { ffi::MPI_Recv(nothing(), 0, bytes, from, tag, w.raw, std::ptr::null_mut()) })
}

/// Completes the sends of the post notices of `w`'s exposure epoch.
fn end_exposure(w: &Win) -> Result<(), c_int> {
    let posts = std::mem::take(&mut w.epochs.lock().posts);
    for mut r in posts {
        // SAFETY: a live request of a send of no data.
        ok(unsafe { ffi::MPI_Wait(&mut r, std::ptr::null_mut()) })?;
    }
    Ok(())
}

mpi_fn! {
    /// Starts an exposure epoch for the origins of `group` (tells them; does not wait).
    fn MPI_Win_post(g: c_int, _assert: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let origins = ranks_of(&w, g)?;
        let bytes = predefined(MPI_BYTE).ok_or(MPI_ERR_INTERN)?;
        let mut posts = Vec::with_capacity(origins.len());
        for &o in &origins {
            // SAFETY: the predefined names are initialized statics that nothing writes.
            let mut r = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: a send of no data, completed by MPI_Win_wait or MPI_Win_test.
            ok(unsafe { ffi::MPI_Isend(nothing(), 0, bytes, o, TAG_POST, w.raw, &mut r) })?;
            posts.push(r);
        }
        let mut e = w.epochs.lock();
        e.exposed_to.extend(origins);
        e.posts.extend(posts);
        Ok(())
    }
}

mpi_fn! {
    /// Starts an access epoch to the targets of `group`: waits until each posted.
    fn MPI_Win_start(g: c_int, _assert: c_int, wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let targets = ranks_of(&w, g)?;
        for &t in &targets {
            receive(&w, t, TAG_POST)?;
        }
        w.epochs.lock().accessing = targets;
        Ok(())
    }
}

mpi_fn! {
    /// Ends the access epoch: its operations are applied at their targets, then each
    /// target is told.
    fn MPI_Win_complete(wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let targets = std::mem::take(&mut w.epochs.lock().accessing);
        for &t in &targets {
            flush(&w, Some(t))?;
        }
        let bytes = predefined(MPI_BYTE).ok_or(MPI_ERR_INTERN)?;
        for &t in &targets {
            // SAFETY: a send of no data; the private communicator lives while the window does.
            ok(unsafe { ffi::MPI_Send(nothing(), 0, bytes, t, TAG_DONE, w.raw) })?;
        }
        Ok(())
    }
}

mpi_fn! {
    /// Ends the exposure epoch: waits until every origin of the posted group completed.
    fn MPI_Win_wait(wh: c_int) on errc(wh) => {
        let w = win(wh)?;
        let origins = std::mem::take(&mut w.epochs.lock().exposed_to);
        for &o in &origins {
            receive(&w, o, TAG_DONE)?;
        }
        end_exposure(&w)
    }
}

mpi_fn! {
    /// `MPI_Win_wait` if every origin completed already (`*flag` = 1), else nothing
    /// (`*flag` = 0; the origins that completed are remembered).
    fn MPI_Win_test(wh: c_int, flag: *mut c_int) on errc(wh) => {
        let w = win(wh)?;
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let origins = std::mem::take(&mut w.epochs.lock().exposed_to);
        let mut left = Vec::new();
        for o in origins {
            let (mut there, mut st) = (0, ffi::MPI_Status::default());
            // SAFETY: locals; the private communicator lives while the window does.
            ok(unsafe { ffi::MPI_Iprobe(o, TAG_DONE, w.raw, &mut there, &mut st) })?;
            if there != 0 {
                receive(&w, o, TAG_DONE)?;
            } else {
                left.push(o);
            }
        }
        let done = left.is_empty();
        w.epochs.lock().exposed_to = left;
        if done {
            end_exposure(&w)?;
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { flag.write(c_int::from(done)) };
        Ok(())
    }
}
