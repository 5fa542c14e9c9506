//! The operating-system calls about processes that std does not offer, each behind a safe
//! function: signals, the effective user, the host name, and how a child is started (in a
//! session of its own, or bound to die with its parent). The daemons and the command-line
//! tools (which forbid `unsafe` code) use these.

use std::io;
use std::process::Command;

/// Sends signal `sig` to process `pid` (`kill(2)`); signal 0 only checks that the process
/// exists and may be signalled. A `pid` of 0 or above `i32::MAX` is refused: as a `pid_t` it
/// would name a process group, or every process (-1), instead of one process.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = match i32::try_from(pid) {
        Ok(p) if p > 0 => p,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{pid} is not a process id"))),
    };
    // SAFETY: kill takes two integers and no pointer, so it cannot touch this process's
    // memory; whatever `sig` makes the target do is the caller's intent, not undefined
    // behaviour.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this process runs with the effective user id of root.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no argument and always succeeds.
    unsafe { libc::geteuid() == 0 }
}

/// Moves the calling thread into the network namespace `ns` (an open `/var/run/netns/NAME`
/// or `/proc/PID/ns/net`, `setns(2)`): the sockets it opens from then on live there. For test
/// harnesses and tools that place peers in namespaces; needs root.
pub fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: setns takes a descriptor, which `ns` keeps open for the call, and a flag; it
    // reads no memory of this process and changes only this thread's network namespace.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The Landlock ABI version the kernel offers (`landlock_create_ruleset(2)` asked for its
/// version), or why there is none (`ENOSYS`: no Landlock in this kernel; `EOPNOTSUPP`: built in
/// but turned off at boot).
pub fn landlock_abi() -> io::Result<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, a size of 0 and the VERSION flag, the call reads
    // and writes no memory of this process: it only returns the ABI version or an error.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// This host's name (`gethostname(2)`), or `localhost` if it cannot be read.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`, which outlives the call.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Makes the child that `cmd` starts lead a new session (`setsid(2)`): no controlling
/// terminal, so that a daemon survives the end of the shell that started it.
pub fn new_session(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child, before exec, where only
    // async-signal-safe calls may be made: it makes one, setsid, which takes no argument,
    // and allocates nothing. (It can only fail for a process group leader, which a freshly
    // forked child is not.)
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Makes the child that `cmd` starts get SIGKILL when its parent ends (`PR_SET_PDEATHSIG`;
/// for the kernel the parent is the thread that spawns it): no orphan process outlives the
/// daemon or launcher that started it.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child, before exec: prctl is async-signal-safe
    // and takes integers only, and reading errno for the error allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPUs this process may run on (`sched_getaffinity(2)`), in increasing order: those of
/// its cpuset or of `taskset`, not every CPU of the host.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into `set`,
    // which outlives the call; pid 0 is the calling thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads bit `c` of `set`, and `c` stays below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Makes the child that `cmd` starts run on CPU `cpu` only (`sched_setaffinity(2)` before
/// exec, so that every thread it starts inherits the binding). A CPU out of range is refused
/// here; one that the child may not use makes its start fail (`EINVAL`).
pub fn bind_to_cpu(cmd: &mut Command, cpu: usize) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is a plain bit array, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET sets bit `cpu` of `set`, and `cpu` is below CPU_SETSIZE (checked).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure runs in the forked child, before exec: sched_setaffinity is a plain
    // system call, reads the set (copied into the closure, alive for the call) and allocates
    // nothing; neither does reading errno for the error.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_go_to_one_process_only() {
        assert!(signal(std::process::id(), 0).is_ok(), "this process exists");
        for pid in [0, u32::MAX, i32::MAX as u32 + 1] {
            assert_eq!(signal(pid, 0).unwrap_err().kind(), io::ErrorKind::InvalidInput, "pid {pid}");
        }
    }

    #[test]
    fn children_start_with_the_settings() {
        let mut cmd = Command::new("true");
        new_session(&mut cmd);
        die_with_parent(&mut cmd);
        assert!(cmd.status().unwrap().success());
        assert!(!hostname().is_empty());
    }

    #[test]
    fn a_bound_child_runs_on_its_cpu_only() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let cpu = *cpus.last().unwrap();
        let mut cmd = Command::new("grep");
        cmd.args(["^Cpus_allowed_list:", "/proc/self/status"]);
        bind_to_cpu(&mut cmd, cpu).unwrap();
        let out = cmd.output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).split_whitespace().nth(1), Some(cpu.to_string().as_str()));
        assert!(bind_to_cpu(&mut Command::new("true"), libc::CPU_SETSIZE as usize).is_err());
    }
}
