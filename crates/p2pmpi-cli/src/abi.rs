//! The launcher's side of MPICH's ABI (`crates/p2pmpi-abi`, docs/mpich-abi.md): programs built
//! against MPICH (`mpicc.mpich`) and mpi4py load p2pmpi's library, with no setting of the user.
//!
//! * [`setup`]: the library the job's `LD_LIBRARY_PATH` already leads to when it is p2pmpi's
//!   (kept, as the user chose it); else [`find_library`]: `P2PMPI_ABI_LIB`, else the built
//!   library (`libp2pmpi_abi.so`) next to the running command (cargo puts `p2pmpirun` and the
//!   library in one directory, `target/debug` or `target/release`), else
//!   `<that directory>/../lib/p2pmpi/`, else `$CARGO_TARGET_DIR/{release,debug}/` (without
//!   `CARGO_TARGET_DIR`: `target/{release,debug}/` of the current directory).
//! * [`library_dir`]: a directory of this user with `libmpi.so.12`, `libmpi.so` and
//!   `libmpich.so.12`, symlinks to it (what `scripts/abi-lib.sh` makes), put first on every
//!   local rank's `LD_LIBRARY_PATH`. A grid job's hosts get the library staged in the job
//!   directory ([`STAGED`]) and the peer daemon makes the same names there.
//! * [`needs`]: whether a program needs the library (it links `libmpich.so.12` or `libmpi.so*`,
//!   or it is Python): then a library not found is an error naming where it was looked for.
//! * [`check_loading`], [`foreign_in_maps`]: a program that would load another MPI library (an
//!   RPATH to Debian's, an `LD_PRELOAD`: [`p2pmpi_peer::ldso`] follows the loader's search) is
//!   refused, and a rank seen with one mapped is stopped, named.

use crate::elf::{is_elf, Elf};
use anyhow::{bail, Context, Result};
use p2pmpi_peer::ldso;
use std::path::{Path, PathBuf};

/// The variable that names the library file.
pub const LIB_ENV: &str = "P2PMPI_ABI_LIB";
/// The file cargo builds.
pub const LIB_FILE: &str = "libp2pmpi_abi.so";
/// The library's DT_SONAME, and the other names programs and loaders look for.
pub const NAMES: [&str; 3] = ["libmpi.so.12", "libmpi.so", "libmpich.so.12"];
/// Where a grid job's hosts get the library: this subdirectory of the job directory, the file
/// `libmpi.so.12` in it.
pub const STAGED: &str = p2pmpi_peer::mpd::ABI_DIR;
/// The exported data symbol of the library that lists its stubs (names separated by newlines).
pub const STUBS_SYMBOL: &str = "p2pmpi_abi_stubs";
/// The header, as this build knows it (`p2pmpi mpicc` writes it next to the library's names
/// when no other is found).
const HEADER: &str = include_str!("../../p2pmpi-abi/include/mpi.h");

/// The places [`find_library`] looks, in order.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(LIB_ENV).filter(|v| !v.is_empty()) {
        // Given: the only place.
        return vec![PathBuf::from(p)];
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        out.push(dir.join(LIB_FILE));
        out.push(dir.join("../lib/p2pmpi").join(LIB_FILE));
    }
    // A build of this clone: cargo's target directory, else `target` of the current directory.
    let target = std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()).unwrap_or_else(|| "target".into());
    for profile in ["release", "debug"] {
        out.push(PathBuf::from(&target).join(profile).join(LIB_FILE));
    }
    out
}

/// The library, or an error naming every place looked at.
pub fn find_library() -> Result<PathBuf> {
    let places = candidates();
    if let Some(p) = places.iter().find(|p| p.is_file()) {
        return std::fs::canonicalize(p).with_context(|| format!("cannot resolve {}", p.display()));
    }
    let list: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    let given = std::env::var_os(LIB_ENV).is_some_and(|v| !v.is_empty());
    bail!(
        "p2pmpi's library with MPICH's ABI ({LIB_FILE}) was not found: looked at {}{}; build it with `cargo build -p \
         p2pmpi-abi` (or --release), or set {LIB_ENV} to its path",
        list.join(", "),
        if given { format!(" (from {LIB_ENV})") } else { String::new() }
    )
}

/// This user's directory for the library's names (created private): in the p2pmpi directory
/// when it exists (it is not made here), else in the temporary directory (checked to be this
/// user's own, not writable by others).
fn cache_root() -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let mut tried = Vec::new();
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX);
    let home = p2pmpi_peer::config::p2pmpi_dir();
    let in_home = home.is_dir().then(|| home.join("abi"));
    for root in in_home.into_iter().chain([std::env::temp_dir().join(format!("p2pmpi-abi-{uid}"))]) {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&root);
        match std::fs::symlink_metadata(&root) {
            Ok(m) if m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0 => return Ok(root),
            Ok(_) => tried.push(format!("{} (not a private directory of this user)", root.display())),
            Err(e) => tried.push(format!("{} ({e})", root.display())),
        }
    }
    bail!("no directory for the library's names: {}", tried.join(", "))
}

/// The directory with `libmpi.so.12`, `libmpi.so` and `libmpich.so.12`, symlinks to `lib`
/// (one per library path; the links are remade, atomically, at every call).
pub fn library_dir(lib: &Path) -> Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lib.hash(&mut h);
    let dir = cache_root()?.join(format!("lib-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, target) in [(NAMES[0], lib), (NAMES[1], Path::new(NAMES[0])), (NAMES[2], Path::new(NAMES[0]))] {
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)
            .and_then(|()| std::fs::rename(&tmp, dir.join(name)))
            .with_context(|| format!("cannot make {}", dir.join(name).display()))?;
    }
    Ok(dir)
}

use p2pmpi_peer::ldso::is_mpi_name;

/// Why `program` needs p2pmpi's library (`None`: it does not seem to; a p2pmpi program in Rust
/// has the library in itself).
pub fn needs(program: &Path) -> Option<String> {
    let base = program.file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
    if base.starts_with("python") {
        return Some("is Python (mpi4py loads libmpi.so)".into());
    }
    let mut head = Vec::with_capacity(256);
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::open(program).ok()?, 256), &mut head).ok()?;
    if !is_elf(&head) {
        let first = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let first = String::from_utf8_lossy(first);
        return (first.starts_with("#!") && first.contains("python"))
            .then(|| "is a Python script (mpi4py loads libmpi.so)".into());
    }
    let needed = Elf::read_dynamic_section(program).and_then(|e| e.needed()).ok()?;
    if let Some(n) = needed.into_iter().find(|n| is_mpi_name(n)) {
        return Some(format!("needs {n} (a program of MPICH's ABI)"));
    }
    // Through one of its libraries (its MPI calls in a library of its own).
    let env = ldso::Env {
        library_path: std::env::var("LD_LIBRARY_PATH").ok(),
        preload: None,
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let objects = ldso::resolve(program, &env).ok()?;
    objects.iter().skip(1).find_map(|o| {
        let n = o.needed().iter().find(|n| is_mpi_name(n))?;
        Some(format!("needs {n} through {} (a program of MPICH's ABI)", o.path.display()))
    })
}

/// The loader's environment of a job's processes started here with `setup` and the job's
/// variables `extra`: `LD_LIBRARY_PATH` as they get it, `LD_PRELOAD` (the job's, else this
/// process's), this directory.
fn loader_env(setup: &Setup, extra: &[(String, String)]) -> ldso::Env {
    let library_path = if setup.prepend { Some(library_path(&setup.dir, extra)) } else { job_library_path(extra) };
    let given = extra.iter().rev().find(|(k, _)| k == "LD_PRELOAD").map(|(_, v)| v.clone());
    let preload = given.or_else(|| std::env::var("LD_PRELOAD").ok()).filter(|v| !v.is_empty());
    ldso::Env { library_path, preload, cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")) }
}

/// Refuses a program whose processes would load another MPI library than `setup`'s (an RPATH
/// searched before `LD_LIBRARY_PATH`, an `LD_PRELOAD`, a library of another MPI's interface):
/// the error names the file, the cause and the remedy. A file the loader's search cannot be
/// followed in (a script, a static program) passes.
pub fn check_loading(program: &Path, setup: &Setup, extra: &[(String, String)]) -> Result<()> {
    match ldso::foreign_mpi(program, &loader_env(setup, extra), &setup.lib) {
        Ok(Some(why)) => bail!("{why}"),
        _ => Ok(()),
    }
}

/// What a process's memory map shows of MPI libraries.
#[derive(Debug, PartialEq, Eq)]
pub enum Maps {
    /// None but ours (or none yet).
    Clean,
    /// Another MPI library: its path.
    Foreign(String),
    /// The process is gone (its map is unreadable or empty).
    Gone,
}

/// Reads `/proc/PID/maps` for an MPI library other than `ours`.
pub fn foreign_in_maps(pid: u32, ours: &Path) -> Maps {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return Maps::Gone };
    if text.is_empty() {
        return Maps::Gone;
    }
    foreign_in(&text, ours).map_or(Maps::Clean, Maps::Foreign)
}

/// The first MPI library of a memory map (`/proc/PID/maps`'s text) that is not `ours`.
fn foreign_in(maps: &str, ours: &Path) -> Option<String> {
    ldso::foreign_in_maps(maps, ours)
}

/// The header's directory for `p2pmpi mpicc`: `P2PMPI_ABI_INCLUDE`, else this build's source
/// tree (`crates/p2pmpi-abi/include`), else a copy of the header this build holds, written next
/// to the library's names.
pub fn include_dir(libdir: &Path) -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("P2PMPI_ABI_INCLUDE").filter(|v| !v.is_empty()) {
        let d = PathBuf::from(d);
        if !d.join("mpi.h").is_file() {
            bail!("P2PMPI_ABI_INCLUDE={}: no mpi.h there", d.display());
        }
        return Ok(d);
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../p2pmpi-abi/include");
    if src.join("mpi.h").is_file() {
        return Ok(std::fs::canonicalize(&src).unwrap_or(src));
    }
    let d = libdir.join("include");
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    let tmp = d.join(format!(".mpi.h.{}", std::process::id()));
    std::fs::write(&tmp, HEADER)
        .and_then(|()| std::fs::rename(&tmp, d.join("mpi.h")))
        .with_context(|| format!("cannot write {}/mpi.h", d.display()))?;
    Ok(d)
}

/// What a job's launch needs of the library.
pub struct Setup {
    /// The library file (resolved).
    pub lib: PathBuf,
    /// The directory of its names.
    pub dir: PathBuf,
    /// Whether `dir` goes first on the processes' library path (not when the job's path already
    /// leads to p2pmpi's library: that one is kept, as the user chose it).
    pub prepend: bool,
}

/// The job's library path: its `-x LD_LIBRARY_PATH`, else this process's.
fn job_library_path(extra: &[(String, String)]) -> Option<String> {
    let given = extra.iter().rev().find(|(k, _)| k == "LD_LIBRARY_PATH").map(|(_, v)| v.clone());
    given.or_else(|| std::env::var("LD_LIBRARY_PATH").ok()).filter(|v| !v.is_empty())
}

/// Whether the library file `lib` is p2pmpi's (it lists its stubs).
fn is_ours(lib: &Path) -> bool {
    Elf::read_dynamic(lib)
        .and_then(|e| e.symbols())
        .is_ok_and(|s| s.iter().any(|s| s.defined && s.name == STUBS_SYMBOL))
}

/// p2pmpi's library where the job's library path already leads a program of MPICH's ABI: the
/// first directory of the path that holds one of its names, when that one is p2pmpi's.
fn given_on_path(extra: &[(String, String)]) -> Option<Setup> {
    let path = job_library_path(extra)?;
    for d in path.split(':').filter(|d| !d.is_empty()) {
        if let Some(f) = NAMES.iter().map(|n| Path::new(d).join(n)).find(|f| f.is_file()) {
            let lib = std::fs::canonicalize(&f).ok()?;
            return is_ours(&lib).then(|| Setup { lib, dir: PathBuf::from(d), prepend: false });
        }
    }
    None
}

/// The library for a job of `program` with the variables `extra` (`-x`): the one the job's
/// library path already leads to if it is p2pmpi's, else the one found and its directory made
/// (`None`: not found, and the program does not need it). An error when the program needs it
/// and it is missing, or when the program would load another MPI library.
pub fn setup(program: &Path, extra: &[(String, String)]) -> Result<Option<Setup>> {
    if let Some(given) = given_on_path(extra) {
        check_loading(program, &given, extra)?;
        return Ok(Some(given));
    }
    let lib = match find_library() {
        Ok(l) => l,
        Err(e) => match needs(program) {
            Some(why) => bail!("{} {why}, and {e:#}", program.display()),
            None => return Ok(None),
        },
    };
    match library_dir(&lib) {
        Ok(dir) => {
            let setup = Setup { lib, dir, prepend: true };
            check_loading(program, &setup, extra)?;
            Ok(Some(setup))
        }
        Err(e) => match needs(program) {
            Some(why) => bail!("{} {why}, and {e:#}", program.display()),
            // A program that does not need it runs without it.
            None => Ok(None),
        },
    }
}

/// `LD_LIBRARY_PATH` with `dir` first, before the job's (`-x`) or else this process's.
pub fn library_path(dir: &Path, extra: &[(String, String)]) -> String {
    match job_library_path(extra) {
        Some(r) => format!("{}:{r}", dir.display()),
        None => dir.display().to_string(),
    }
}

/// The variables that make every process of a job — replicas included — run Python alike:
/// one `PYTHONHASHSEED` (the job's `-x` one, else this process's, else drawn for the job) and
/// unbuffered output (`PYTHONUNBUFFERED=1`, unless given). `forward`: the processes do not
/// inherit this process's environment (the grid), so its values are passed on.
pub fn python_env(extra: &[(String, String)], forward: bool) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let given = |k: &str| extra.iter().any(|(x, _)| x == k);
    for (key, fresh) in [("PYTHONHASHSEED", None), ("PYTHONUNBUFFERED", Some("1".to_string()))] {
        if given(key) {
            continue;
        }
        match std::env::var(key) {
            Ok(v) if forward => out.push((key.to_string(), v)),
            Ok(_) => {}
            Err(_) => {
                let v = match fresh {
                    Some(v) => v,
                    None => {
                        let mut b = [0u8; 4];
                        getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
                        u32::from_le_bytes(b).to_string()
                    }
                };
                out.push((key.to_string(), v));
            }
        }
    }
    Ok(out)
}

/// How long after the first process of a job registered one of a program of MPICH's ABI that
/// has not is named, with its likely cause.
pub const JOIN_NOTICE: std::time::Duration = std::time::Duration::from_secs(5);

/// The early word on processes that do not join, for a job of `program` when it is of MPICH's
/// ABI (`None` for others: a Rust program's processes join or fail by themselves).
pub fn join_notice(program: &Path) -> Option<p2pmpi_core::supervisor::JoinNotice> {
    needs(program)?;
    let cause = "likely cause: its process loaded another MPI library than p2pmpi's libmpi.so.12 (through an \
                 LD_PRELOAD, a dlopen by path, or an RPATH to a directory of its host), which makes it an MPI world of \
                 its own; `p2pmpi abi-check PROGRAM` on its host shows an RPATH or LD_PRELOAD";
    Some(p2pmpi_core::supervisor::JoinNotice { after: JOIN_NOTICE, cause: cause.to_string() })
}

/// Watches the processes of `slots` (slot, pid) that have not registered yet: one that maps
/// another MPI library stops the job, named with the library (an abort of that slot). Ends
/// when each registered or ended, or after `limit`.
pub(crate) fn watch_foreign(
    slots: Vec<(usize, u32)>,
    ours: PathBuf,
    sup: crate::supervise::SharedSupervisor,
    tx: std::sync::mpsc::Sender<crate::supervise::Event>,
    limit: std::time::Duration,
) {
    use std::time::{Duration, Instant};
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut left = slots;
        let mut pause = Duration::from_millis(5);
        while !left.is_empty() && start.elapsed() < limit {
            left.retain(|&(slot, pid)| {
                if sup.registered(slot) {
                    return false;
                }
                match foreign_in_maps(pid, &ours) {
                    Maps::Clean => true,
                    Maps::Gone => false,
                    Maps::Foreign(lib) => {
                        let message = format!(
                            "it loaded another MPI library, {lib}, instead of p2pmpi's ({}): the program finds that \
                             one first (an RPATH, an LD_PRELOAD, or a path given to dlopen); relink it without the \
                             RPATH or remove that library from its path",
                            ours.display()
                        );
                        let _ = tx.send(crate::supervise::Event::Abort { rank: slot, code: 1, message, lost: None });
                        false
                    }
                }
            });
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpi_libraries_other_than_ours_are_found_in_a_memory_map() {
        let ours = Path::new("/home/u/.p2pmpi/abi/target/debug/libp2pmpi_abi.so");
        let maps = "7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r--p 00000000 08:01 13 /home/u/.p2pmpi/abi/target/debug/libp2pmpi_abi.so\n\
                    7f04-7f05 rw-p 00000000 00:00 0 \n";
        assert_eq!(foreign_in(maps, ours), None);
        let other = format!("{maps}7f06-7f07 r-xp 00000000 08:01 14 /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0\n");
        assert_eq!(foreign_in(&other, ours).as_deref(), Some("/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0"));
        let ompi = "7f06-7f07 r-xp 00000000 08:01 14 /opt/my lib/libmpi.so.40 (deleted)\n";
        assert_eq!(foreign_in(ompi, ours).as_deref(), Some("/opt/my lib/libmpi.so.40"));
        assert!(!is_mpi_name("libmpi_abi.so") && is_mpi_name("libmpich.so.12") && is_mpi_name("/x/libmpi.so"));
    }

    #[test]
    fn the_library_path_puts_ours_first_and_keeps_the_job_s() {
        let dir = Path::new("/c/lib-1");
        let extra = vec![("LD_LIBRARY_PATH".to_string(), "/a:/b".to_string())];
        assert_eq!(library_path(dir, &extra), "/c/lib-1:/a:/b");
    }

    #[test]
    fn python_runs_alike_in_every_process_of_a_job() {
        let given = vec![("PYTHONHASHSEED".to_string(), "7".to_string()), ("PYTHONUNBUFFERED".into(), "".into())];
        assert!(python_env(&given, true).unwrap().is_empty());
        let env = python_env(&[], false).unwrap();
        if std::env::var_os("PYTHONHASHSEED").is_none() {
            assert!(env.iter().any(|(k, v)| k == "PYTHONHASHSEED" && v.parse::<u32>().is_ok()));
        }
        if std::env::var_os("PYTHONUNBUFFERED").is_none() {
            assert!(env.contains(&("PYTHONUNBUFFERED".to_string(), "1".to_string())));
        }
    }
}
