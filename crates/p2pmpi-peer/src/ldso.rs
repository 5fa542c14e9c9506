//! Which files a program's libraries would be loaded from, found as glibc's dynamic loader
//! finds them, without running anything (`ldd` runs the loader): the launcher and the peer
//! daemon ask it whether a program of MPICH's ABI would load p2pmpi's `libmpi.so.12` or
//! another MPI library (an RPATH to MPICH's directory, an `LD_PRELOAD`).
//!
//! The rules followed ([`resolve`]): `LD_PRELOAD`'s objects first (a path, or a name
//! searched as the program's need), then the libraries needed (`DT_NEEDED`) breadth-first, the
//! program's first, each loaded once: a name already loaded (as asked, by its `DT_SONAME` or
//! its path) or a file already loaded (the same device and inode, through a symlink) is not
//! looked for again. A name with a `/` is that path; another is searched in
//!
//! 1. the `DT_RPATH` of the object that needs it, then of the object that loaded that one, up
//!    to the program — only when the object that needs it has no `DT_RUNPATH` (an object with
//!    both has only its `DT_RUNPATH`);
//! 2. `LD_LIBRARY_PATH`;
//! 3. the `DT_RUNPATH` of the object that needs it (its own only);
//! 4. unless it is marked `DF_1_NODEFLIB`: the directories of `/etc/ld.so.conf` (the loader's
//!    cache is made of them), then the default ones (`/lib/<triple>`, `/usr/lib/<triple>`,
//!    `/lib64`, `/usr/lib64`, `/lib`, `/usr/lib`).
//!
//! In paths, `$ORIGIN` is the directory of the object that holds the path (the program's
//! resolved one for `LD_LIBRARY_PATH`), `$LIB` `lib/<triple>` and `$PLATFORM` the machine; an
//! empty entry is the current directory, a relative one is taken from it. A file that is not a
//! 64-bit little-endian ELF file is passed over, as the loader passes over a library of the
//! wrong class. Not followed: the `glibc-hwcaps` subdirectories, secure (setuid) mode, and
//! `dlopen` (seen at run time only).

use crate::elf::Elf;
use anyhow::Result;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// The most objects followed (a program with more is not followed further).
const MAX_OBJECTS: usize = 1024;

/// What the loader of a process is given.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `LD_LIBRARY_PATH`.
    pub library_path: Option<String>,
    /// `LD_PRELOAD`.
    pub preload: Option<String>,
    /// The process's current directory.
    pub cwd: PathBuf,
}

/// Why an object was loaded from where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The program itself.
    Program,
    /// This entry of `LD_PRELOAD`.
    Preload(String),
    /// A `DT_NEEDED` that names a path.
    Path,
    /// This entry of the `DT_RPATH` of `object`.
    Rpath { object: PathBuf, entry: String },
    /// This entry of `LD_LIBRARY_PATH`.
    LibraryPath(String),
    /// This entry of the `DT_RUNPATH` of the object that needs it.
    Runpath(String),
    /// The system's directories (the loader's cache, its default directories).
    System,
}

/// An object of the process.
#[derive(Debug, Clone)]
pub struct Object {
    /// The name it was asked for by (the program's path for the program).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Why that file.
    pub via: Via,
    /// The object whose need loaded it (none for the program and `LD_PRELOAD`'s).
    pub needed_by: Option<usize>,
    soname: Option<String>,
    needed: Vec<String>,
    /// Its DT_RPATH, when it has no DT_RUNPATH.
    rpath: Option<String>,
    runpath: Option<String>,
    nodeflib: bool,
    id: Option<(u64, u64)>,
    /// The object that loaded it (the program for `LD_PRELOAD`'s).
    loader: Option<usize>,
}

impl Object {
    /// The libraries it needs (DT_NEEDED).
    pub fn needed(&self) -> &[String] {
        &self.needed
    }

    /// Whether the loader takes this object for a need of `name`.
    fn answers(&self, name: &str) -> bool {
        self.name == name || self.soname.as_deref() == Some(name) || self.path.as_os_str() == name
    }
}

/// The device and inode of `p` (following symlinks).
fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| (m.dev(), m.ino()))
}

/// The multiarch triple of this machine (`x86_64-linux-gnu`).
fn triple() -> String {
    format!("{}-linux-gnu", std::env::consts::ARCH)
}

/// The directories of the loader's cache, as `/etc/ld.so.conf` lists them.
fn conf_dirs(file: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(text) = std::fs::read_to_string(file) else { return };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").filter(|p| p.starts_with([' ', '\t'])) {
            if depth < 8 {
                for f in glob(pattern.trim(), file.parent().unwrap_or(Path::new("/"))) {
                    conf_dirs(&f, depth + 1, out);
                }
            }
        } else if line.starts_with('/') {
            out.push(PathBuf::from(line));
        }
    }
}

/// The files a pattern with at most one `*`, in its last component, names (sorted).
fn glob(pattern: &str, base: &Path) -> Vec<PathBuf> {
    let p = base.join(pattern);
    let (Some(dir), Some(last)) = (p.parent(), p.file_name().and_then(|l| l.to_str())) else { return Vec::new() };
    let Some((pre, post)) = last.split_once('*') else { return vec![p.clone()] };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post))
        })
        .collect();
    out.sort();
    out
}

/// The system's directories, in the loader's order.
fn system_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    conf_dirs(Path::new("/etc/ld.so.conf"), 0, &mut out);
    let t = triple();
    for d in [format!("/lib/{t}"), format!("/usr/lib/{t}"), "/lib64".into(), "/usr/lib64".into()] {
        out.push(PathBuf::from(d));
    }
    out.extend(["/lib", "/usr/lib"].map(PathBuf::from));
    out
}

/// The entries of a search path (`:`-separated; empty ones kept).
fn entries(path: &str) -> impl Iterator<Item = &str> {
    path.split(':')
}

/// The directory an entry names: tokens expanded, taken from `cwd` when relative.
fn expand(entry: &str, origin: &Path, cwd: &Path) -> PathBuf {
    let origin = origin.to_string_lossy();
    let lib = format!("lib/{}", triple());
    let mut s = entry.to_string();
    for (token, value) in [("ORIGIN", origin.as_ref()), ("LIB", lib.as_str()), ("PLATFORM", std::env::consts::ARCH)] {
        s = s.replace(&format!("${{{token}}}"), value).replace(&format!("${token}"), value);
    }
    if s.is_empty() {
        cwd.to_path_buf()
    } else {
        cwd.join(s)
    }
}

/// The directory holding `path`, resolved (the loader's `$ORIGIN`).
fn origin_of(path: &Path, cwd: &Path) -> PathBuf {
    let abs = cwd.join(path);
    let dir = abs.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// A process's objects as the loader finds them.
struct Process<'a> {
    env: &'a Env,
    objects: Vec<Object>,
    /// The program's `$ORIGIN`.
    origin: PathBuf,
    system: Option<Vec<PathBuf>>,
}

impl Process<'_> {
    /// The object at `path` (`None`: not a readable ELF file of this machine's kind).
    fn object(path: &Path, name: &str, via: Via, needed_by: Option<usize>, loader: Option<usize>) -> Option<Object> {
        let elf = Elf::read_dynamic_section(path).ok()?;
        let (rpath, runpath) = elf.raw_search_paths().ok()?;
        Some(Object {
            name: name.to_string(),
            path: path.to_path_buf(),
            via,
            needed_by,
            soname: elf.soname().ok()?,
            needed: elf.needed().ok()?,
            rpath: rpath.filter(|_| runpath.is_none()),
            runpath,
            nodeflib: elf.nodeflib().ok()?,
            id: file_id(path),
            loader,
        })
    }

    /// The loaded object a need of `name` is, if any.
    fn loaded(&self, name: &str) -> Option<usize> {
        self.objects.iter().position(|o| o.answers(name))
    }

    /// The loaded object that is the file `path`, if any.
    fn same_file(&self, path: &Path) -> Option<usize> {
        let id = file_id(path)?;
        self.objects.iter().position(|o| o.id == Some(id))
    }

    /// The file a need of `name` by object `by` is found at, and why.
    fn search(&mut self, name: &str, by: usize) -> Option<(PathBuf, Via)> {
        let cwd = self.env.cwd.clone();
        if name.contains('/') {
            let p = cwd.join(name);
            return file_id(&p).map(|_| (p, Via::Path));
        }
        let found = |dir: PathBuf| Some(dir.join(name)).filter(|f| Elf::read_dynamic_section(f).is_ok());
        if self.objects[by].runpath.is_none() {
            let mut at = Some(by);
            while let Some(i) = at {
                let o = &self.objects[i];
                let origin = origin_of(&o.path, &cwd);
                for e in o.rpath.iter().flat_map(|r| entries(r)) {
                    if let Some(f) = found(expand(e, &origin, &cwd)) {
                        return Some((f, Via::Rpath { object: o.path.clone(), entry: e.to_string() }));
                    }
                }
                at = o.loader;
            }
        }
        for e in self.env.library_path.iter().flat_map(|p| entries(p)) {
            if let Some(f) = found(expand(e, &self.origin, &cwd)) {
                return Some((f, Via::LibraryPath(e.to_string())));
            }
        }
        let o = &self.objects[by];
        let origin = origin_of(&o.path, &cwd);
        for e in o.runpath.iter().flat_map(|r| entries(r)) {
            if let Some(f) = found(expand(e, &origin, &cwd)) {
                return Some((f, Via::Runpath(e.to_string())));
            }
        }
        if o.nodeflib {
            return None;
        }
        let system = self.system.get_or_insert_with(system_dirs);
        system.iter().find_map(|d| found(d.clone())).map(|f| (f, Via::System))
    }

    /// Loads a need of `name` by object `by` (`via`: the reason to give instead of the
    /// search's).
    fn load(&mut self, name: &str, by: usize, needed_by: Option<usize>, via: Option<Via>, queue: &mut VecDeque<usize>) {
        if self.loaded(name).is_some() || self.objects.len() >= MAX_OBJECTS {
            return;
        }
        let Some((path, how)) = self.search(name, by) else { return };
        if self.same_file(&path).is_some() {
            return;
        }
        if let Some(o) = Process::object(&path, name, via.unwrap_or(how), needed_by, Some(by)) {
            self.objects.push(o);
            queue.push_back(self.objects.len() - 1);
        }
    }
}

/// Every object a process of `program` would load under `env`, in the loader's order: the
/// program first, then `LD_PRELOAD`'s, then the libraries they need, breadth-first. Needs
/// that are not found are left out (the loader would stop the program, saying which).
pub fn resolve(program: &Path, env: &Env) -> Result<Vec<Object>> {
    let main = Process::object(program, &program.to_string_lossy(), Via::Program, None, None).ok_or_else(|| {
        anyhow::anyhow!("{}: not a dynamically linked ELF program of this machine", program.display())
    })?;
    let origin = origin_of(program, &env.cwd);
    let mut p = Process { env, objects: vec![main], origin, system: None };
    let mut queue = VecDeque::from([0]);
    for e in env.preload.iter().flat_map(|v| v.split([' ', ':'])).filter(|e| !e.is_empty()) {
        p.load(e, 0, None, Some(Via::Preload(e.to_string())), &mut queue);
    }
    while let Some(i) = queue.pop_front() {
        for name in p.objects[i].needed.clone() {
            p.load(&name, i, Some(i), None, &mut queue);
        }
    }
    Ok(p.objects)
}

/// Whether a library's name (or path) is an MPI library's: `libmpi.so*`, `libmpich.so*`.
pub fn is_mpi_name(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.starts_with("libmpi.so") || base.starts_with("libmpich.so")
}

/// The first MPI library of a memory map (`/proc/PID/maps`'s text) that is not `ours` (its
/// resolved path: the map names files by theirs).
pub fn foreign_in_maps(maps: &str, ours: &Path) -> Option<String> {
    maps.lines()
        .filter_map(|l| l.find('/').map(|i| l[i..].trim_end_matches(" (deleted)")))
        .find(|p| is_mpi_name(p) && Path::new(p) != ours)
        .map(str::to_string)
}

/// Why a process of `program` under `env` would load an MPI library other than `ours` (the
/// file of p2pmpi's `libmpi.so.12`), in words that name the file, the cause and the remedy;
/// `None` when every MPI library it loads is `ours`.
pub fn foreign_mpi(program: &Path, env: &Env, ours: &Path) -> Result<Option<String>> {
    let objects = resolve(program, env)?;
    let ours_id = file_id(ours);
    let Some(o) = objects.iter().skip(1).find(|o| {
        let mpi = is_mpi_name(&o.name)
            || o.soname.as_deref().is_some_and(is_mpi_name)
            || is_mpi_name(&o.path.to_string_lossy());
        mpi && (ours_id.is_none() || o.id != ours_id)
    }) else {
        return Ok(None);
    };
    let by = o.needed_by.map(|j| objects[j].path.display().to_string());
    // Named when a library of the program needs it (the program's own needs go without saying).
    let needed = match o.needed_by {
        Some(j) if j > 0 => format!(", needed as {} by {}", o.name, objects[j].path.display()),
        _ => String::new(),
    };
    let (cause, remedy) = match &o.via {
        Via::Rpath { object, entry } => (
            format!("the RPATH of {} ({entry}) is searched before LD_LIBRARY_PATH", object.display()),
            format!(
                "link {} without -Wl,-rpath,{entry}, or with -Wl,--enable-new-dtags (a RUNPATH is searched after \
                 LD_LIBRARY_PATH)",
                object.display()
            ),
        ),
        Via::Preload(e) => (format!("LD_PRELOAD loads it ({e})"), "leave it out of LD_PRELOAD".to_string()),
        Via::Path => (
            format!("{} names it by its path", by.as_deref().unwrap_or("the program")),
            "link against the library's name (-lmpich), not its path".to_string(),
        ),
        Via::LibraryPath(e) => (
            format!("LD_LIBRARY_PATH's entry {e:?} holds it before p2pmpi's"),
            "take that entry out of LD_LIBRARY_PATH".to_string(),
        ),
        Via::Runpath(_) | Via::System | Via::Program => (
            format!(
                "{} is not a name of MPICH's binary interface (libmpi.so.12, libmpich.so.12), which p2pmpi's library \
                 has: it is another MPI's",
                o.name
            ),
            "rebuild it with mpicc.mpich or p2pmpi mpicc".to_string(),
        ),
    };
    Ok(Some(format!(
        "{} would load another MPI library in every rank, {}{needed}, not p2pmpi's ({}): {cause}; {remedy}, or run it \
         with that library's own mpiexec",
        program.display(),
        o.path.display(),
        ours.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_empty_and_relative_entries_expand_as_the_loader_does() {
        let (o, cwd) = (Path::new("/opt/app/bin"), Path::new("/home/u"));
        assert_eq!(expand("$ORIGIN/../lib", o, cwd), PathBuf::from("/opt/app/bin/../lib"));
        assert_eq!(expand("${ORIGIN}/x", o, cwd), PathBuf::from("/opt/app/bin/x"));
        assert_eq!(expand("", o, cwd), PathBuf::from("/home/u"));
        assert_eq!(expand("libs", o, cwd), PathBuf::from("/home/u/libs"));
        let lib = expand("/x/$LIB/$PLATFORM", o, cwd);
        assert_eq!(lib, PathBuf::from(format!("/x/lib/{}/{}", triple(), std::env::consts::ARCH)));
    }

    /// A minimal 64-bit ELF shared object: a dynamic section (its DT_NEEDED, DT_SONAME,
    /// DT_RPATH, DT_RUNPATH) and its string table, nothing else.
    fn elf(soname: Option<&str>, needed: &[&str], rpath: Option<&str>, runpath: Option<&str>) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut dynamic: Vec<(u64, u64)> = Vec::new();
        let tagged = needed.iter().map(|n| (1, *n)).chain(soname.map(|n| (14, n)));
        for (tag, text) in tagged.chain(rpath.map(|r| (15, r))).chain(runpath.map(|r| (29, r))) {
            dynamic.push((tag, strtab.len() as u64));
            strtab.extend_from_slice(text.as_bytes());
            strtab.push(0);
        }
        dynamic.push((0, 0));
        let str_off = 64u64;
        let dyn_off = (str_off + strtab.len() as u64).next_multiple_of(8);
        let sh_off = dyn_off + 16 * dynamic.len() as u64;
        let mut d = vec![0u8; 64];
        d[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        d[0x10..0x12].copy_from_slice(&3u16.to_le_bytes());
        d[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
        d[0x28..0x30].copy_from_slice(&sh_off.to_le_bytes());
        d[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        d[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        d.extend_from_slice(&strtab);
        d.resize(dyn_off as usize, 0);
        for (t, v) in &dynamic {
            d.extend_from_slice(&t.to_le_bytes());
            d.extend_from_slice(&v.to_le_bytes());
        }
        let section = |kind: u32, off: u64, size: u64, link: u32| {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&off.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h
        };
        d.extend(vec![0u8; 64]);
        d.extend(section(3, str_off, strtab.len() as u64, 0));
        d.extend(section(6, dyn_off, 16 * dynamic.len() as u64, 1));
        d
    }

    /// A directory of ELF files made for one test: `ours/` holds p2pmpi's library under its
    /// three names, `mpich/` another `libmpich.so.12` and `libmpi.so.12`.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let t = Tree(std::env::temp_dir().join(format!("p2pmpi-ldso-{name}-{}", std::process::id())));
            let _ = std::fs::remove_dir_all(&t.0);
            t.put("ours/libmpi.so.12", &elf(Some("libmpi.so.12"), &["libc.so.6"], None, None));
            std::os::unix::fs::symlink("libmpi.so.12", t.0.join("ours/libmpich.so.12")).unwrap();
            t.put("mpich/libmpich.so.12", &elf(Some("libmpich.so.12"), &["libc.so.6"], None, None));
            t.put("mpich/libmpi.so.12", &elf(Some("libmpi.so.12"), &[], None, None));
            t
        }
        fn put(&self, rel: &str, data: &[u8]) -> PathBuf {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, data).unwrap();
            p
        }
        fn d(&self, rel: &str) -> String {
            self.0.join(rel).display().to_string()
        }
        fn env(&self) -> Env {
            Env { library_path: Some(self.d("ours")), preload: None, cwd: self.0.clone() }
        }
        /// The foreign MPI library a program would load, if any: its file and why.
        fn verdict(&self, prog: &Path, env: &Env) -> Option<(PathBuf, Via)> {
            let objects = resolve(prog, env).unwrap();
            let ours = file_id(&self.0.join("ours/libmpi.so.12"));
            objects.into_iter().skip(1).find(|o| is_mpi_name(&o.name) && o.id != ours).map(|o| (o.path, o.via))
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn an_rpath_is_searched_before_ld_library_path_and_a_runpath_after() {
        let t = Tree::new("order");
        let mpich = t.d("mpich");
        let env = t.env();
        let rpath = t.put("rpath", &elf(None, &["libmpich.so.12", "libc.so.6"], Some(&mpich), None));
        let rpath_is = Via::Rpath { object: rpath.clone(), entry: mpich.clone() };
        assert_eq!(t.verdict(&rpath, &env), Some((t.0.join("mpich/libmpich.so.12"), rpath_is)));
        let runpath = t.put("runpath", &elf(None, &["libmpich.so.12"], None, Some(&mpich)));
        assert_eq!(t.verdict(&runpath, &env), None);
        // Both: the RPATH is ignored.
        let both = t.put("both", &elf(None, &["libmpich.so.12"], Some(&mpich), Some(&mpich)));
        assert_eq!(t.verdict(&both, &env), None);
        // $ORIGIN, and an entry that does not hold it, passed over.
        let origin = t.put("origin", &elf(None, &["libmpich.so.12"], Some("/nonexistent:$ORIGIN/mpich"), None));
        let via = t.verdict(&origin, &env).map(|(_, v)| v);
        assert_eq!(via, Some(Via::Rpath { object: origin.clone(), entry: "$ORIGIN/mpich".into() }));
        // Not an ELF file under the name: passed over, as the loader does.
        t.put("junk/libmpich.so.12", b"not a library");
        let junk = t.put("junk-rpath", &elf(None, &["libmpich.so.12"], Some(&t.d("junk")), None));
        assert_eq!(t.verdict(&junk, &env), None);
        // Without ours on the library path, a RUNPATH leads to MPICH too.
        let bare = Env { library_path: None, ..t.env() };
        let via = t.verdict(&runpath, &bare).map(|(_, v)| v);
        assert_eq!(via, Some(Via::Runpath(mpich.clone())));
        let why = foreign_mpi(&rpath, &env, &t.0.join("ours/libmpi.so.12")).unwrap().unwrap();
        assert!(why.contains("would load another MPI library") && why.contains("the RPATH of"), "{why}");
        assert!(why.contains("--enable-new-dtags"), "{why}");
        assert_eq!(foreign_mpi(&runpath, &env, &t.0.join("ours/libmpi.so.12")).unwrap(), None);
    }

    #[test]
    fn the_rpaths_of_the_objects_that_loaded_a_library_count_and_a_loaded_name_is_not_looked_for_again() {
        let t = Tree::new("chain");
        let (mpich, env) = (t.d("mpich"), t.env());
        // The program's RPATH serves the needs of the libraries it loads (without a RUNPATH).
        t.put("libs/libfoo.so", &elf(Some("libfoo.so"), &["libmpich.so.12"], None, None));
        let libs_and_mpich = format!("{}:{mpich}", t.d("libs"));
        let prog = t.put("prog", &elf(None, &["libfoo.so"], Some(&libs_and_mpich), None));
        let found = t.verdict(&prog, &env);
        assert_eq!(found.map(|(_, v)| v), Some(Via::Rpath { object: prog.clone(), entry: mpich.clone() }));
        // A library with a RUNPATH does not take its loaders' RPATH.
        t.put("libs2/libfoo.so", &elf(Some("libfoo.so"), &["libmpich.so.12"], None, Some("/nonexistent")));
        let prog2 = t.put("prog2", &elf(None, &["libfoo.so"], Some(&format!("{}:{mpich}", t.d("libs2"))), None));
        assert_eq!(t.verdict(&prog2, &env), None);
        // A library's own RPATH, found through the program's RUNPATH.
        t.put("libs3/libfoo.so", &elf(Some("libfoo.so"), &["libmpich.so.12"], Some(&mpich), None));
        let prog3 = t.put("prog3", &elf(None, &["libfoo.so"], None, Some("$ORIGIN/libs3")));
        let lib = t.0.join("libs3/libfoo.so");
        assert_eq!(t.verdict(&prog3, &env).map(|(_, v)| v), Some(Via::Rpath { object: lib, entry: mpich.clone() }));
        // Ours loaded first as libmpich.so.12: a later need of its SONAME (libmpi.so.12) is it,
        // whatever RPATH the library that needs it has.
        t.put("libs4/libbar.so", &elf(Some("libbar.so"), &["libmpi.so.12"], Some(&mpich), None));
        let prog4 = t.put("prog4", &elf(None, &["libmpich.so.12", "libbar.so"], None, Some(&t.d("libs4"))));
        assert_eq!(t.verdict(&prog4, &env), None);
        let objects = resolve(&prog4, &env).unwrap();
        let names: Vec<&str> = objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names[1..3], ["libmpich.so.12", "libbar.so"]);
        assert!(names.contains(&"libc.so.6"), "found in the system's directories: {names:?}");
        // Its other name through the symlink is the same file: loaded once.
        let prog5 = t.put("prog5", &elf(None, &["libmpich.so.12", "libmpi.so"], None, None));
        std::os::unix::fs::symlink("libmpi.so.12", t.0.join("ours/libmpi.so")).unwrap();
        let n = resolve(&prog5, &env).unwrap().iter().filter(|o| is_mpi_name(&o.name)).count();
        assert_eq!(n, 1);
    }

    #[test]
    fn ld_preload_and_other_abis_are_seen() {
        let t = Tree::new("preload");
        let env = t.env();
        let prog = t.put("prog", &elf(None, &["libmpich.so.12"], None, None));
        assert_eq!(t.verdict(&prog, &env), None);
        let path = t.d("mpich/libmpich.so.12");
        let pre = Env { preload: Some(format!("  {path} ")), ..t.env() };
        assert_eq!(t.verdict(&prog, &pre), Some((PathBuf::from(&path), Via::Preload(path.clone()))));
        let why = foreign_mpi(&prog, &pre, &t.0.join("ours/libmpi.so.12")).unwrap().unwrap();
        assert!(why.contains("LD_PRELOAD"), "{why}");
        // A name of another MPI's interface (Open MPI's libmpi.so.40): not ours, wherever found.
        t.put("ompi/libmpi.so.40", &elf(Some("libmpi.so.40"), &[], None, None));
        let ompi = t.put("ompi-prog", &elf(None, &["libmpi.so.40"], None, Some(&t.d("ompi"))));
        let why = foreign_mpi(&ompi, &env, &t.0.join("ours/libmpi.so.12")).unwrap().unwrap();
        assert!(why.contains("libmpi.so.40 is not a name of MPICH's binary interface"), "{why}");
        // A file that is not a program is an error, not a verdict.
        assert!(resolve(&t.0.join("junk"), &env).is_err());
    }

    #[test]
    fn ld_so_conf_includes_are_followed_in_order() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-ldso-conf-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        std::fs::write(dir.join("ld.so.conf"), "# c\n/first\ninclude conf.d/*.conf\n/last # trailing\n").unwrap();
        std::fs::write(dir.join("conf.d/b.conf"), "/b\n").unwrap();
        std::fs::write(dir.join("conf.d/a.conf"), "/a1\n\n/a2\n").unwrap();
        std::fs::write(dir.join("conf.d/skip.txt"), "/no\n").unwrap();
        let mut out = Vec::new();
        conf_dirs(&dir.join("ld.so.conf"), 0, &mut out);
        assert_eq!(out, ["/first", "/a1", "/a2", "/b", "/last"].map(PathBuf::from));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
