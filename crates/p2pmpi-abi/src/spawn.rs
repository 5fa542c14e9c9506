//! Dynamic processes: `MPI_Comm_spawn`, `MPI_Comm_spawn_multiple`, `MPI_Comm_get_parent`, on
//! the library's spawning (`p2pmpi::collective::Root::spawn`): the root's launcher starts the
//! children as a job of their own, connected to their parents by an intercommunicator. The
//! info arguments are not used; the children inherit the launcher's environment (with it,
//! the library path that makes them load this library).

use crate::consts::*;
use crate::errors::inherit_handler;
use crate::handles::{rust_comm, CommEntry, COMMS};
use crate::put;
use p2pmpi::topology::{InterCommunicator, SimpleCommunicator};
use p2pmpi::traits::*;
use parking_lot::Mutex;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::process::Command;

/// The MPICH handle of intercommunicator `inter`, which the table then owns.
fn new_inter(inter: InterCommunicator) -> c_int {
    let raw = inter.as_raw();
    // SAFETY: `raw` names `inter`, alive here; the new object shares it (and keeps it alive
    // once `inter` is dropped).
    let rust = unsafe { SimpleCommunicator::from_raw(raw) };
    COMMS.insert(CommEntry { raw, rust })
}

/// The strings of a NULL-terminated `argv` (none for `MPI_ARGV_NULL`).
///
/// # Safety
/// `argv` must be null or a NULL-terminated array of C strings.
unsafe fn strings(argv: *const *const c_char) -> Result<Vec<String>, c_int> {
    let mut v = Vec::new();
    if argv.is_null() {
        return Ok(v);
    }
    for i in 0.. {
        // SAFETY: the caller's contract: every entry up to the NULL is readable.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: as above: a C string.
        v.push(unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| MPI_ERR_ARG)?.to_string());
    }
    Ok(v)
}

/// The command of `command` and `argv` (the root's only).
///
/// # Safety
/// `command` a C string, `argv` as for [`strings`].
unsafe fn command_of(command: *const c_char, argv: *const *const c_char) -> Result<Command, c_int> {
    if command.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    let prog = unsafe { CStr::from_ptr(command) }.to_str().map_err(|_| MPI_ERR_ARG)?;
    let mut c = Command::new(prog);
    // SAFETY: the caller's contract.
    c.args(unsafe { strings(argv) }?);
    Ok(c)
}

/// Spawns the commands `prepare` makes at the root (`maxprocs` processes of each) from `c`
/// (collective), and writes the intercommunicator and the children's codes.
///
/// # Safety
/// `intercomm` valid for a write; `errcodes` null or valid for as many writes as children.
unsafe fn spawn(
    c: c_int,
    root: c_int,
    prepare: impl FnOnce() -> Result<(Vec<Command>, Vec<c_int>), c_int>,
    intercomm: *mut c_int,
    errcodes: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    if intercomm.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if root < 0 || root >= rc.size() {
        return Err(MPI_ERR_ROOT);
    }
    // Only the root's arguments count: it tells the others how many processes of how many
    // commands (none if its arguments are wrong: then every member fails, none waits).
    let at_root = if rc.rank() == root { Some(prepare()) } else { None };
    let mut len = [match &at_root {
        Some(Ok((_, p))) => p.len() as c_int,
        _ => 0,
    }];
    let r = rc.process_at_rank(root);
    r.broadcast_into(&mut len[..]);
    let mut procs = match &at_root {
        Some(Ok((_, p))) => p.clone(),
        _ => vec![0; len[0] as usize],
    };
    r.broadcast_into(&mut procs[..]);
    let commands = match at_root {
        Some(Ok((cmds, _))) => cmds,
        Some(Err(e)) => return Err(e),
        None if len[0] == 0 => return Err(MPI_ERR_SPAWN),
        None => procs.iter().map(|_| Command::new("")).collect(),
    };
    let codes = |n: c_int, code: c_int| {
        if !errcodes.is_null() {
            for i in 0..n.max(0) as usize {
                // SAFETY: the caller's contract: a code per child.
                unsafe { errcodes.add(i).write(code) };
            }
        }
    };
    match r.spawn_multiple(&commands, &procs) {
        Ok(inter) => {
            codes(inter.remote_size(), MPI_SUCCESS);
            let h = new_inter(inter);
            inherit_handler(c, h);
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { put(intercomm, h) }
        }
        Err(p2pmpi::topology::MpiError::Spawn(_, asked)) => {
            codes(asked, MPI_ERR_SPAWN);
            // SAFETY: as above.
            unsafe { intercomm.write(MPI_COMM_NULL) };
            Err(MPI_ERR_SPAWN)
        }
        Err(_) => Err(MPI_ERR_SPAWN),
    }
}

mpi_fn! {
    /// Starts `maxprocs` processes of `command` with arguments `argv` (the root's count);
    /// `*intercomm` connects `comm`'s members to them (collective over `comm`).
    fn MPI_Comm_spawn(
        command: *const c_char,
        argv: *const *const c_char,
        maxprocs: c_int,
        _info: c_int,
        root: c_int,
        c: c_int,
        intercomm: *mut c_int,
        errcodes: *mut c_int,
    ) on c => {
        let prepare = || {
            if maxprocs < 1 {
                return Err(MPI_ERR_ARG);
            }
            // SAFETY: the caller's contract.
            Ok((vec![unsafe { command_of(command, argv) }?], vec![maxprocs]))
        };
        // SAFETY: the caller's contract.
        unsafe { spawn(c, root, prepare, intercomm, errcodes) }
    }
}

mpi_fn! {
    /// Starts `maxprocs[i]` processes of each `commands[i]` (with `argvs[i]`) in one world
    /// (their `MPI_APPNUM` is `i`); see `MPI_Comm_spawn`.
    fn MPI_Comm_spawn_multiple(
        count: c_int,
        commands: *const *const c_char,
        argvs: *const *const *const c_char,
        maxprocs: *const c_int,
        _infos: *const c_int,
        root: c_int,
        c: c_int,
        intercomm: *mut c_int,
        errcodes: *mut c_int,
    ) on c => {
        let prepare = || {
            if count < 1 || commands.is_null() || maxprocs.is_null() {
                return Err(MPI_ERR_ARG);
            }
            let mut cmds = Vec::new();
            // SAFETY: the caller vouches for `count` entries in each array.
            let procs = unsafe { std::slice::from_raw_parts(maxprocs, count as usize) }.to_vec();
            if procs.iter().any(|&p| p < 1) {
                return Err(MPI_ERR_ARG);
            }
            for i in 0..count as usize {
                let argv = if argvs.is_null() {
                    std::ptr::null() // MPI_ARGVS_NULL
                } else {
                    // SAFETY: as above.
                    unsafe { *argvs.add(i) }
                };
                // SAFETY: as above.
                cmds.push(unsafe { command_of(*commands.add(i), argv) }?);
            }
            Ok((cmds, procs))
        };
        // SAFETY: the caller's contract.
        unsafe { spawn(c, root, prepare, intercomm, errcodes) }
    }
}

/// The handle `MPI_Comm_get_parent` gave, so that it gives the same each time.
// Process-wide: a process has one parent intercommunicator.
static PARENT: Mutex<Option<c_int>> = Mutex::new(None);

mpi_fn! {
    /// In a process started by `MPI_Comm_spawn`: the intercommunicator to its parents;
    /// `MPI_COMM_NULL` in the others.
    fn MPI_Comm_get_parent(parent: *mut c_int) on MPI_COMM_WORLD => {
        if parent.is_null() {
            return Err(MPI_ERR_ARG);
        }
        rust_comm(MPI_COMM_WORLD)?;
        let mut p = PARENT.lock();
        let live = p.filter(|&h| COMMS.with(h, |_| ()).is_some());
        let h = match live {
            Some(h) => h,
            None => match SimpleCommunicator::world().parent() {
                Some(inter) => {
                    let h = new_inter(inter);
                    *p = Some(h);
                    h
                }
                None => MPI_COMM_NULL,
            },
        };
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(parent, h) }
    }
}
