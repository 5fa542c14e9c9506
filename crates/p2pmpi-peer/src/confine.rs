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
//! The ruleset is built in the daemon, before the fork: the child, between fork and exec,
//! only sets its limits and calls `prctl` and `landlock_restrict_self` (system calls on
//! integers and an open descriptor, see [`confine`]). See `docs/security.md`.

use crate::config::Config;
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
}

/// The widest port range enforced (one Landlock rule per port).
const MAX_BIND_RULES: u32 = 4096;

/// The directories one confined process may write.
#[derive(Debug, Clone)]
pub struct JobPaths {
    pub job_dir: PathBuf,
    pub tmp: PathBuf,
    pub shm: PathBuf,
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
        let uids = cfg.job_uids.filter(|_| crate::os::is_root());
        let (lo, hi) = (cfg.min_port, cfg.max_port);
        let bind_ports = (lo > 0 && lo <= hi && u32::from(hi - lo) < MAX_BIND_RULES).then_some((lo, hi));
        Confiner { abi, read, limits, allow_unconfined: cfg.allow_unconfined_jobs, uids, bind_ports }
    }

    /// What this daemon cannot enforce on the jobs it confines, in words (empty: everything
    /// it knows how to).
    pub fn unenforced(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.abi == 0 {
            v.push("file-system confinement, signal scoping and the ptrace restriction (no Landlock in this kernel)");
            return v;
        }
        if self.abi < 2 {
            v.push("refer (moving files between directories; Landlock ABI 2)");
        }
        if self.abi < 3 {
            v.push("truncation of files (Landlock ABI 3)");
        }
        if self.abi < 4 {
            v.push("TCP bind limited to MIN_PORT..MAX_PORT (Landlock ABI 4)");
        } else if self.bind_ports.is_none() {
            v.push("TCP bind limited to MIN_PORT..MAX_PORT (the range is empty or wider than 4096 ports)");
        }
        if self.abi < 5 {
            v.push("ioctl on devices (Landlock ABI 5)");
        }
        if self.abi < 6 {
            v.push("signals to processes outside the job (Landlock ABI 6)");
        }
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
            rs = rs.scope(Scope::Signal).map_err(err)?;
        }
        let bind = self.bind_ports.filter(|_| self.abi >= 4);
        if bind.is_some() {
            rs = rs.handle_access(AccessNet::BindTcp).map_err(err)?;
        }
        let mut created = rs.create().map_err(err)?;
        if let Some((lo, hi)) = bind {
            // Port 0 too: a connection from a chosen local address binds it (the system picks
            // the port), as the MPI library's connections from `P2PMPI_BIND` do.
            let ports = std::iter::once(0).chain(lo..=hi);
            created = created
                .add_rules(ports.map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(p, AccessNet::BindTcp))))
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

    /// Makes the child that `cmd` starts confined: its limits, no core dump, `no_new_privs`,
    /// and `ruleset` (from [`Confiner::ruleset`]).
    pub fn confine(&self, cmd: &mut Command, ruleset: Option<OwnedFd>) {
        let limits = self.limits;
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
