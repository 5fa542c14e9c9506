//! Confined jobs: what the processes a peer daemon starts for another member's job may do.
//!
//! Each such process runs under a Landlock domain of its own (read and execute on what
//! programs need, read and write only on its job directory, its temporary directory and its
//! directory of shared-memory segments; from ABI 6, no signal to a process outside the
//! domain), with `no_new_privs`, no core dump, and the limits of the configuration
//! (`JOB_MEMORY_MB`, `JOB_CPU_SECONDS`, `JOB_FILE_MB`, `JOB_PROCESSES`), soft and hard alike,
//! so that the process cannot raise them again. Landlock also forbids a sandboxed process to
//! `ptrace` a process outside its domain, or to read its `/proc/PID/environ` or `mem`.
//!
//! From Landlock ABI 4 a process binds TCP ports of `MIN_PORT`..`MAX_PORT` only, and
//! connects only to those, to `JOB_CONNECT_PORTS` and to its launcher's control port (never
//! to this daemon's own service ports). A daemon running as root runs each job as a user of
//! its own (`JOB_UIDS`, by default [`SUGGESTED_JOB_UIDS`]), never as root; where it can make
//! control groups (`pids`, `memory`: v1 or v2), each job has its own, which counts its
//! processes and memory on this host apart from every other job's.
//!
//! The ruleset is built in the daemon, before the fork: the child, between fork and exec,
//! only sets its limits and calls `prctl` and `landlock_restrict_self` (system calls on
//! integers and an open descriptor, see [`confine`]). See `docs/security.md`.

use crate::config::{Config, SUGGESTED_JOB_UIDS};
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The system's paths a program may read and execute (those that exist here).
const SYSTEM_READ: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt", "/sys"];
/// What a program may read of `/proc` besides its own entries (nothing of another process).
const PROC_READ: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys",
];
/// Devices a program may read (and `/dev/null` write).
const DEVICES_READ: &[&str] = &["/dev/urandom", "/dev/random", "/dev/zero"];

/// The Landlock ABI of the running kernel (0: no Landlock, or disabled).
pub fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag only
    // returns the ABI version (or -1): it reads no memory of this process.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The limits of each confined process (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_mb: u64,
    pub cpu_seconds: u64,
    pub file_mb: u64,
    pub processes: u64,
}

/// How this daemon confines the jobs it starts (from its configuration and its kernel).
#[derive(Debug, Clone)]
pub struct Confiner {
    /// The Landlock ABI used: the kernel's, or less if `JOB_LANDLOCK_ABI` says so (0: none).
    pub abi: u32,
    /// Paths read and executed (the system's, `/etc`'s entries, `JOB_READ_PATHS`).
    read: Vec<PathBuf>,
    pub limits: Limits,
    /// `ALLOW_UNCONFINED_JOBS`.
    pub allow_unconfined: bool,
    /// `JOB_UIDS`, when this daemon runs as root (`None` otherwise: jobs run as its user).
    pub uids: Option<(u32, u32)>,
    /// The TCP ports a process may bind (`MIN_PORT`..`MAX_PORT`, its `P2PMPI_PORTS`), from
    /// Landlock ABI 4; `None` if the range is too wide for one rule per port.
    pub bind_ports: Option<(u16, u16)>,
    /// The TCP ports a process may connect to besides its launcher's (`MIN_PORT`..`MAX_PORT`
    /// and `JOB_CONNECT_PORTS`), from Landlock ABI 4; `None`: not restricted (too many ports
    /// for one rule per port, or `JOB_CONNECT_PORTS=any`).
    pub connect_ports: Option<Vec<(u16, u16)>>,
    /// This daemon's own service ports (MPD, RS, FT, FD): never granted by `MIN_PORT`..`MAX_PORT`.
    pub service_ports: Vec<u16>,
    /// Where the jobs' control groups are made (none: the kernel counts processes per user).
    pub cgroups: Cgroups,
}

/// The widest port range enforced (one Landlock rule per port).
const MAX_BIND_RULES: u32 = 4096;

/// The directories one confined process may write, and its job's own TCP ports.
#[derive(Debug, Clone, Default)]
pub struct JobPaths {
    pub job_dir: PathBuf,
    pub tmp: PathBuf,
    pub shm: PathBuf,
    /// Ports the process may connect to besides [`Confiner::connect_ports`]: its launcher's
    /// control port.
    pub connect: Vec<u16>,
}

impl Confiner {
    pub fn from_config(cfg: &Config) -> Confiner {
        let kernel = kernel_abi();
        let abi = cfg.job_landlock_abi.map_or(kernel, |a| a.min(kernel));
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().chain(PROC_READ).map(PathBuf::from).collect();
        if let Ok(entries) = std::fs::read_dir("/etc") {
            let mut etc: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| !cfg.job_hidden_etc.iter().any(|h| e.file_name().to_str() == Some(h.as_str())))
                .map(|e| e.path())
                .collect();
            etc.sort();
            read.extend(etc);
        }
        read.extend(cfg.job_read_paths.iter().cloned());
        let limits = Limits {
            memory_mb: cfg.job_memory_mb,
            cpu_seconds: cfg.job_cpu_seconds,
            file_mb: cfg.job_file_mb,
            processes: cfg.job_processes,
        };
        // As root, never root: a user of the job's own, from the configured range or ours.
        let uids = crate::os::is_root().then(|| cfg.job_uids.unwrap_or(SUGGESTED_JOB_UIDS));
        let (lo, hi) = (cfg.min_port, cfg.max_port);
        let bind_ports = (lo > 0 && lo <= hi && u32::from(hi - lo) < MAX_BIND_RULES).then_some((lo, hi));
        let mut connect: Vec<(u16, u16)> = bind_ports.into_iter().collect();
        connect.extend(cfg.job_connect_ports.iter().copied());
        let count: u32 = connect.iter().map(|&(a, b)| u32::from(b - a) + 1).sum();
        let connect_ports = (bind_ports.is_some() && count <= MAX_BIND_RULES).then_some(connect);
        Confiner {
            abi,
            read,
            limits,
            allow_unconfined: cfg.allow_unconfined_jobs,
            uids,
            bind_ports,
            connect_ports,
            service_ports: vec![cfg.mpd_port, cfg.rs_port, cfg.ft_port, cfg.fd_port],
            cgroups: Cgroups::detect(),
        }
    }

    /// Lets the processes also read and execute `path` (and what is below it): a local job's
    /// program outside its directory (`p2pmpirun --local --confine`).
    pub fn grant_read(&mut self, path: PathBuf) {
        if !self.read.contains(&path) {
            self.read.push(path);
        }
    }

    /// Makes the control group of a job that starts `procs` processes here, when a limit
    /// asks for one and this host lets us (`None` otherwise).
    pub fn job_cgroup(&self, job: &str, procs: usize) -> io::Result<Option<JobCgroup>> {
        self.cgroups.job(&format!("{job}-{}", std::process::id()), &self.limits, procs as u64)
    }

    /// What this daemon cannot enforce on the jobs it confines, in words (empty: everything
    /// it knows how to).
    pub fn unenforced(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        if self.abi == 0 {
            v.push(
                "file-system confinement, signal scoping and the ptrace restriction (no Landlock in this kernel)"
                    .into(),
            );
            return v;
        }
        if self.abi < 2 {
            v.push("refer (moving files between directories; Landlock ABI 2)".into());
        }
        if self.abi < 3 {
            v.push("truncation of files (Landlock ABI 3)".into());
        }
        if self.abi < 4 {
            v.push("TCP bind and connect limited to the job's ports (Landlock ABI 4)".into());
        } else if self.bind_ports.is_none() {
            v.push(
                "TCP bind and connect limited to the job's ports (MIN_PORT..MAX_PORT is wider than 4096 ports)".into(),
            );
        } else if self.connect_ports.is_none() {
            v.push("TCP connect limited to the job's ports (JOB_CONNECT_PORTS allows more than 4096 ports)".into());
        }
        if self.abi < 5 {
            v.push("ioctl on devices (Landlock ABI 5)".into());
        }
        if self.abi < 6 {
            v.push("signals to processes outside the job (Landlock ABI 6)".into());
        }
        v.extend(self.cgroups.missing.iter().cloned());
        v
    }

    /// Whether another member's job may start here: with Landlock, or unconfined if the owner
    /// allows it.
    pub fn refusal(&self) -> Option<String> {
        (self.abi == 0 && !self.allow_unconfined).then(|| {
            "this host's kernel has no Landlock: other members' jobs are refused here (ALLOW_UNCONFINED_JOBS=no)".into()
        })
    }

    /// The user id job `job` runs as (`None`: as this daemon's user, which is not root): one of
    /// `JOB_UIDS` drawn from the job id, so that every daemon of this host runs the job's
    /// processes as the same user (their shared-memory segments must belong to it). Two jobs
    /// may draw the same id (one chance in the size of the range): Landlock still keeps them
    /// apart.
    pub fn uid_for(&self, job: &str) -> Option<u32> {
        let (first, last) = self.uids?;
        let h = blake3::hash(job.as_bytes());
        let n = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
        Some(first + (n % (u64::from(last - first) + 1)) as u32)
    }

    /// Gives the job's user `uid` its directories (`paths`, and the directories under the job
    /// directory: staged files stay the daemon's, readable), and makes `cmd` run as `uid`
    /// (group `uid`, no supplementary group). The job directory must be reachable by any user:
    /// a parent directory closed to others is refused here, with its name.
    pub fn run_as(&self, cmd: &mut Command, uid: u32, paths: &JobPaths) -> io::Result<()> {
        for dir in [&paths.job_dir, &paths.shm] {
            for a in dir.ancestors().skip(1) {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(a)?.permissions().mode();
                if mode & 0o001 == 0 {
                    return Err(io::Error::other(format!(
                        "{} is closed to other users (mode {:o}): the jobs' user {uid} cannot reach {}",
                        a.display(),
                        mode & 0o7777,
                        dir.display()
                    )));
                }
            }
        }
        let mut dirs = vec![paths.job_dir.clone(), paths.tmp.clone(), paths.shm.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if dirs[i].starts_with(&paths.job_dir) {
                for e in std::fs::read_dir(&dirs[i])?.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) && !dirs.contains(&e.path()) {
                        dirs.push(e.path());
                    }
                }
            }
            i += 1;
        }
        for d in &dirs {
            std::os::unix::fs::chown(d, Some(uid), Some(uid))?;
        }
        cmd.uid(uid).gid(uid);
        Ok(())
    }

    /// Builds the Landlock ruleset of one process (in the daemon, before the fork): its
    /// descriptor, `None` without Landlock. The process's own `/proc` entries are added in
    /// the child ([`Confiner::confine`]): only there is `/proc/self` the child's.
    pub fn ruleset(&self, paths: &JobPaths) -> io::Result<Option<OwnedFd>> {
        if self.abi == 0 {
            return Ok(None);
        }
        let abi = ABI::from(self.abi.min(i32::MAX as u32) as i32);
        let err = |e: landlock::RulesetError| io::Error::other(e.to_string());
        let mut rs = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(err)?;
        if self.abi >= 6 {
            rs = rs.scope(Scope::Signal | Scope::AbstractUnixSocket).map_err(err)?;
        }
        let bind = self.bind_ports.filter(|_| self.abi >= 4);
        if bind.is_some() {
            rs = rs.handle_access(AccessNet::BindTcp).map_err(err)?;
        }
        let connect = self.connect_ports.as_ref().filter(|_| self.abi >= 4);
        if connect.is_some() {
            rs = rs.handle_access(AccessNet::ConnectTcp).map_err(err)?;
        }
        let mut created = rs.create().map_err(err)?;
        if let Some((lo, hi)) = bind {
            // Port 0 too: a connection from a chosen local address binds it (the system picks
            // the port), as the MPI library's connections from `P2PMPI_BIND` do. Not the
            // daemons' service ports: no process may connect to them (`connect_set`), so a
            // process listening there would be cut off from its job (the MPI library takes the
            // next port of the range).
            let service = &self.service_ports;
            let ports = std::iter::once(0).chain((lo..=hi).filter(|p| !service.contains(p)));
            created = created
                .add_rules(ports.map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(p, AccessNet::BindTcp))))
                .map_err(err)?;
        }
        if let Some(ranges) = connect {
            let ports = self.connect_set(ranges, &paths.connect);
            created = created
                .add_rules(
                    ports.into_iter().map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(p, AccessNet::ConnectTcp))),
                )
                .map_err(err)?;
        }
        let read = AccessFs::from_read(abi);
        let file_rw = AccessFs::from_file(abi);
        let mut rules: Vec<(&Path, landlock::BitFlags<AccessFs>)> = Vec::new();
        for p in &self.read {
            rules.push((p, read));
        }
        for d in DEVICES_READ {
            rules.push((Path::new(d), AccessFs::ReadFile.into()));
        }
        rules.push((Path::new("/dev/null"), file_rw & !AccessFs::Execute));
        for d in [&paths.job_dir, &paths.tmp, &paths.shm] {
            rules.push((d, AccessFs::from_all(abi)));
        }
        for (path, access) in rules {
            // A path that does not exist here (no /lib32) is skipped.
            let Ok(fd) = PathFd::new(path) else { continue };
            let is_dir = path.is_dir();
            let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
            created = created.add_rule(PathBeneath::new(fd, access)).map_err(err)?;
        }
        let fd: Option<OwnedFd> = created.into();
        Ok(fd)
    }

    /// The ports a process may connect to: `ranges` but this daemon's service ports (those
    /// of `JOB_CONNECT_PORTS` stay granted), and `own` (its launcher's).
    fn connect_set(&self, ranges: &[(u16, u16)], own: &[u16]) -> Vec<u16> {
        let mut ports: Vec<u16> = own.to_vec();
        for (k, &(lo, hi)) in ranges.iter().enumerate() {
            let grid_range = k == 0;
            ports.extend((lo..=hi).filter(|p| !(grid_range && self.service_ports.contains(p))));
        }
        ports.sort_unstable();
        ports.dedup();
        ports.retain(|&p| p != 0);
        ports
    }

    /// Makes the child that `cmd` starts confined: its limits, no core dump, `no_new_privs`,
    /// and `ruleset` (from [`Confiner::ruleset`]).
    pub fn confine(&self, cmd: &mut Command, ruleset: Option<OwnedFd>) {
        self.confine_in(cmd, ruleset, None).expect("nothing to open without a control group");
    }

    /// [`Confiner::confine`], the child first moved into the job's control group `cgroup`
    /// (which then counts its processes instead of `RLIMIT_NPROC`).
    pub fn confine_in(
        &self,
        cmd: &mut Command,
        ruleset: Option<OwnedFd>,
        cgroup: Option<&JobCgroup>,
    ) -> io::Result<()> {
        let mut limits = self.limits;
        if let Some(cg) = cgroup {
            // The group counts the job's processes (the kernel checks `RLIMIT_NPROC` first, so
            // it would refuse the fork unseen by the group and count every job of the user).
            if cg.pids.is_some() {
                limits.processes = 0;
            }
            cg.enter(cmd)?;
        }
        let proc_self = (AccessFs::ReadFile | AccessFs::ReadDir).bits();
        // SAFETY: the closure runs in the forked child, before exec. It makes system calls
        // only (setrlimit, prctl, open of a constant path, landlock_add_rule and
        // landlock_restrict_self on the ruleset's descriptor, opened by the parent, close),
        // on integers and on memory the closure owns: it allocates nothing and takes no lock.
        unsafe {
            cmd.pre_exec(move || {
                set_limits(&limits)?;
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(rs) = &ruleset {
                    restrict_self(rs.as_raw_fd(), proc_self)?;
                }
                Ok(())
            });
        }
        Ok(())
    }
}

/// Replaces every file of `dir` (and below) that has other links (a staged file is a hard
/// link to the FT cache, shared with every job that staged the same content) by a copy of its
/// own, mode kept: a job running as the daemon's user may write the files of its directory,
/// and must not change another job's through a shared inode. Returns the bytes copied.
pub fn unshare_files(dir: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut copied = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let m = std::fs::symlink_metadata(e.path())?;
            if m.is_dir() {
                dirs.push(e.path());
            } else if m.is_file() && m.nlink() > 1 {
                let tmp = d.join(format!(".p2pmpi-unshare-{}", e.file_name().to_string_lossy()));
                copied += std::fs::copy(e.path(), &tmp)?;
                std::fs::set_permissions(&tmp, m.permissions())?;
                std::fs::rename(&tmp, e.path())?;
            }
        }
    }
    Ok(copied)
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's headers).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_long = 1;

/// In the child: adds read access to its own `/proc` entries to the ruleset `fd`, then
/// enforces it on itself. System calls only (async-signal-safe).
///
/// # Safety
/// To be called between fork and exec with `fd` a Landlock ruleset.
unsafe fn restrict_self(fd: i32, proc_self: u64) -> io::Result<()> {
    // SAFETY: a constant, NUL-terminated path; O_PATH opens no file for reading.
    let me = unsafe { libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY) };
    if me >= 0 {
        let attr = PathBeneathAttr { allowed_access: proc_self, parent_fd: me };
        // SAFETY: `attr` lives for the call and has the kernel's layout; the kernel copies it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                fd,
                LANDLOCK_RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0,
            )
        };
        let err = io::Error::last_os_error();
        // SAFETY: `me` was opened above and is closed once.
        unsafe { libc::close(me) };
        if r != 0 {
            return Err(err);
        }
    }
    // SAFETY: landlock_restrict_self takes a descriptor and flags; no memory of ours.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    set_rlimit2(resource, value, value)
}

fn set_rlimit2(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads `lim`, which lives for the call.
    if unsafe { libc::setrlimit(resource, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The limits of the calling process, soft and hard (no core dump in any case).
fn set_limits(l: &Limits) -> io::Result<()> {
    set_rlimit(libc::RLIMIT_CORE, 0)?;
    if l.memory_mb > 0 {
        set_rlimit(libc::RLIMIT_AS, l.memory_mb << 20)?;
    }
    if l.cpu_seconds > 0 {
        // The hard limit a second later: the soft one sends SIGXCPU (which stops the process
        // and names the cause), the hard one SIGKILL (which says nothing) if it is caught.
        set_rlimit2(libc::RLIMIT_CPU, l.cpu_seconds, l.cpu_seconds.saturating_add(1))?;
    }
    if l.file_mb > 0 {
        set_rlimit(libc::RLIMIT_FSIZE, l.file_mb << 20)?;
    }
    if l.processes > 0 {
        set_rlimit(libc::RLIMIT_NPROC, l.processes)?;
    }
    Ok(())
}

/// Words for a confined process killed by one of its limits (`None` for other signals).
pub fn limit_signal(signal: i32, l: &Limits) -> Option<String> {
    match signal {
        libc::SIGXCPU => Some(format!("CPU time limit exceeded (JOB_CPU_SECONDS={})", l.cpu_seconds)),
        libc::SIGXFSZ => Some(format!("file size limit exceeded (JOB_FILE_MB={})", l.file_mb)),
        _ => None,
    }
}

/// Where this daemon makes its jobs' control groups: a `p2pmpi` directory in the `pids` and
/// `memory` hierarchies (cgroup v1, or one directory of the unified v2 hierarchy), made by a
/// daemon running as root, or made and given to the daemon's user by the owner.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    /// The unified hierarchy (v2): other file names.
    v2: bool,
    /// What could not be used here, in words (logged at start).
    pub missing: Vec<String>,
}

/// The name of this daemon's directory in each hierarchy.
const CGROUP_DIR: &str = "p2pmpi";

impl Cgroups {
    /// Finds the hierarchies in `/proc/self/mounts`: v1 `pids` and `memory` where mounted,
    /// else a v2 hierarchy that offers them.
    pub fn detect() -> Cgroups {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut c = Cgroups::default();
        let (mut v1_pids, mut v1_mem, mut v2) = (None, None, None);
        for l in mounts.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [_, dir, kind, opts, ..] = f[..] else { continue };
            let has = |o: &str| opts.split(',').any(|x| x == o);
            match kind {
                "cgroup" if has("pids") => v1_pids = Some(PathBuf::from(dir)),
                "cgroup" if has("memory") => v1_mem = Some(PathBuf::from(dir)),
                "cgroup2" => {
                    let ctl = std::fs::read_to_string(Path::new(dir).join("cgroup.controllers")).unwrap_or_default();
                    if ctl.split_whitespace().any(|x| x == "pids" || x == "memory") && v2.is_none() {
                        v2 = Some((PathBuf::from(dir), ctl));
                    }
                }
                _ => {}
            }
        }
        if v1_pids.is_none() && v1_mem.is_none() {
            if let Some((root, ctl)) = v2 {
                c.v2 = true;
                match Self::prepare_v2(&root, &ctl) {
                    Ok(enabled) => {
                        let base = root.join(CGROUP_DIR);
                        for (name, slot) in [("pids", &mut c.pids), ("memory", &mut c.memory)] {
                            if enabled.split_whitespace().any(|x| x == name) {
                                *slot = Some(base.clone());
                            }
                        }
                    }
                    Err(e) => c.missing.push(format!("per-job control groups (cgroup v2 at {}: {e})", root.display())),
                }
            }
        } else {
            for (name, mount, slot) in [("pids", v1_pids, &mut c.pids), ("memory", v1_mem, &mut c.memory)] {
                let Some(mount) = mount else { continue };
                let base = mount.join(CGROUP_DIR);
                match std::fs::create_dir_all(&base) {
                    Ok(()) => *slot = Some(base),
                    Err(e) => c.missing.push(format!("per-job {name} control groups ({}: {e})", base.display())),
                }
            }
        }
        for (name, slot) in [("pids", &c.pids), ("memory", &c.memory)] {
            if slot.is_none() && c.missing.iter().all(|m| !m.contains(name)) {
                c.missing.push(format!("per-job {name} control groups (no {name} controller mounted)"));
            }
        }
        c
    }

    /// Makes `ROOT/p2pmpi` and hands it the `pids` and `memory` controllers; returns those
    /// it has.
    fn prepare_v2(root: &Path, ctl: &str) -> io::Result<String> {
        let base = root.join(CGROUP_DIR);
        std::fs::create_dir_all(&base)?;
        let want: Vec<&str> =
            ["pids", "memory"].into_iter().filter(|c| ctl.split_whitespace().any(|x| x == *c)).collect();
        for dir in [root, base.as_path()] {
            for c in &want {
                // Already enabled, or enabled by the owner: an error here is not fatal.
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
            }
        }
        std::fs::read_to_string(base.join("cgroup.subtree_control"))
    }

    /// Whether jobs get control groups here.
    pub fn available(&self) -> bool {
        self.pids.is_some() || self.memory.is_some()
    }

    /// Makes the control group `name` for a job of `procs` processes here, with room for
    /// `limits.processes` tasks and `limits.memory_mb` MiB per process (`None`: neither is set,
    /// or no hierarchy here).
    fn job(&self, name: &str, limits: &Limits, procs: u64) -> io::Result<Option<JobCgroup>> {
        let procs = procs.max(1);
        let pids = self.pids.as_ref().filter(|_| limits.processes > 0).map(|b| b.join(name));
        let memory = self.memory.as_ref().filter(|_| limits.memory_mb > 0).map(|b| b.join(name));
        if pids.is_none() && memory.is_none() {
            return Ok(None);
        }
        let cg = JobCgroup { pids, memory, v2: self.v2 };
        for d in cg.dirs() {
            std::fs::create_dir_all(&d)?;
        }
        if let Some(d) = &cg.pids {
            std::fs::write(d.join("pids.max"), (limits.processes * procs).to_string())?;
        }
        if let Some(d) = &cg.memory {
            let bytes = (limits.memory_mb * procs) << 20;
            let file = if self.v2 { "memory.max" } else { "memory.limit_in_bytes" };
            std::fs::write(d.join(file), bytes.to_string())?;
        }
        Ok(Some(cg))
    }
}

/// One job's control group(s) on this host; its processes are killed and the group removed
/// when it is dropped.
#[derive(Debug)]
pub struct JobCgroup {
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    v2: bool,
}

/// What a job's control group saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupEvents {
    /// Forks refused at the job's process limit.
    pub forks_refused: u64,
    /// Processes killed at the job's memory limit.
    pub oom_kills: u64,
}

impl JobCgroup {
    fn dirs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.pids.iter().chain(self.memory.iter()).cloned().collect();
        v.dedup();
        v
    }

    /// Makes the child that `cmd` starts enter this group before it runs anything (the files
    /// are opened here; the child writes `0`, itself, to each).
    fn enter(&self, cmd: &mut Command) -> io::Result<()> {
        let fds: Vec<OwnedFd> = self
            .dirs()
            .iter()
            .map(|d| std::fs::OpenOptions::new().write(true).open(d.join("cgroup.procs")).map(OwnedFd::from))
            .collect::<io::Result<_>>()?;
        // SAFETY: the closure runs in the forked child, before exec: it only calls write on
        // descriptors it owns, with a constant buffer; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                for fd in &fds {
                    if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .dirs()
            .iter()
            .flat_map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The group's counters now.
    pub fn events(&self) -> CgroupEvents {
        let count = |file: PathBuf, key: &str| -> u64 {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            text.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
        };
        let forks_refused = self.pids.as_ref().map_or(0, |d| count(d.join("pids.events"), "max "));
        let oom = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let oom_kills = self.memory.as_ref().map_or(0, |d| count(d.join(oom), "oom_kill "));
        CgroupEvents { forks_refused, oom_kills }
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        for d in self.dirs() {
            // What the job left running (processes it detached) ends with it.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            loop {
                for pid in self.pids() {
                    let _ = crate::os::signal(pid, libc::SIGKILL);
                }
                if std::fs::remove_dir(&d).is_ok() || !d.exists() || std::time::Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}
