//! Where a daemon keeps its state: the user's p2pmpi directory (no administrator rights).
//!
//! ```text
//! <home>/P2P-MPI.conf          configuration (unless P2PMPI_CONF_FILE names another file)
//! <home>/mpd.json              the running peer daemon: pid, address, service ports
//! <home>/supernode.json        the running supernode: pid, address
//! <home>/tmp/mpd-<host>.log    the peer daemon's log (as in the thesis' `mpiboot` sample)
//! <home>/tmp/supernode.log     the supernode's log
//! <home>/ft-cache/<hash>       staged files, by content (the FT's per-peer cache)
//! <home>/jobs/<job>/           a running job's directory (program and input files)
//! ```
//!
//! State files are written owner-only (0600) and atomically ([`write_private`]).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Paths of one daemon's state.
#[derive(Debug, Clone)]
pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Home { dir: dir.into() }
    }

    /// The user's p2pmpi directory (`P2PMPI_HOME`, else `~/.p2pmpi`).
    pub fn user() -> Self {
        Home::new(crate::config::p2pmpi_dir())
    }

    pub fn mpd_state(&self) -> PathBuf {
        self.dir.join("mpd.json")
    }
    pub fn supernode_state(&self) -> PathBuf {
        self.dir.join("supernode.json")
    }
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }
    pub fn mpd_log(&self) -> PathBuf {
        self.log_dir().join(format!("mpd-{}.log", hostname()))
    }
    pub fn supernode_log(&self) -> PathBuf {
        self.log_dir().join("supernode.log")
    }
    pub fn ft_cache(&self) -> PathBuf {
        self.dir.join("ft-cache")
    }
    pub fn jobs(&self) -> PathBuf {
        self.dir.join("jobs")
    }

    /// Creates the directories a daemon needs (owner-only permissions).
    pub fn create(&self) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        for d in [self.dir.clone(), self.log_dir(), self.ft_cache(), self.jobs()] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
        }
        Ok(())
    }
}

/// What a running peer daemon publishes about itself (read by the local commands).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpdState {
    pub pid: u32,
    pub ip: IpAddr,
    pub mpd_port: u16,
    pub rs_port: u16,
    pub ft_port: u16,
    pub fd_port: u16,
    pub version: String,
}

impl MpdState {
    pub fn mpd_addr(&self) -> SocketAddr {
        SocketAddr::new(connectable(self.ip), self.mpd_port)
    }
}

/// What a running supernode publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupernodeState {
    pub pid: u32,
    pub addr: SocketAddr,
}

/// An unspecified bind address (0.0.0.0) is reached through loopback.
pub fn connectable(ip: IpAddr) -> IpAddr {
    if ip.is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        ip
    }
}

/// Writes a state file as JSON with [`write_private`].
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_private(path, &serde_json::to_vec_pretty(value)?)
}

/// Writes a file that only its owner may read (mode 0600, whatever the umask), atomically:
/// the content goes to a new temporary file of the same directory, created 0600, which is
/// then renamed over `path`. A reader sees the old content or the new one, never a torn file,
/// and a secret it holds (`grid.json`, a `P2P-MPI.conf` with `GRID_SECRET`) is never readable
/// by others, not even for a moment, also when the file existed with a wider mode before.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = path.file_name().with_context(|| format!("cannot write {}: not a file name", path.display()))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}-{:08x}",
        name.to_string_lossy(),
        std::process::id(),
        random_u128() as u32
    ));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// Reads a state file; `None` if it does not exist or does not parse.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Is a process with this pid alive (and not a zombie we could reap)?
pub fn pid_alive(pid: u32) -> bool {
    if crate::os::signal(pid, 0).is_err() {
        return false;
    }
    // A zombie still answers kill(0): look at its state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rsplit(')').next().map(|rest| !rest.trim_start().starts_with('Z')).unwrap_or(true),
        Err(_) => true,
    }
}

/// This host's name.
pub fn hostname() -> String {
    crate::os::hostname()
}

/// A random value from the operating system.
pub fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system has no randomness");
    u128::from_le_bytes(b)
}

/// Formats an age like the thesis' samples: `0D 0:2:1:441` (days, hours:minutes:seconds:ms).
pub fn format_age(ms: u64) -> String {
    let days = ms / 86_400_000;
    let h = ms / 3_600_000 % 24;
    let m = ms / 60_000 % 60;
    let s = ms / 1000 % 60;
    format!("{days}D {h}:{m}:{s}:{:03}", ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_the_thesis() {
        assert_eq!(format_age(2 * 60_000 + 1441), "0D 0:2:1:441");
        assert_eq!(format_age(86_400_000 + 3_600_000 + 7), "1D 1:0:0:007");
    }

    #[test]
    fn state_files_are_private_and_replaced_atomically() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("p2pmpi-home-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("grid.json");
        // A file left world-readable by an older version is replaced by a private one.
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_json(&path, &serde_json::json!({"secret": "s3cret"})).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "mode {mode:o}");
        assert_eq!(read_json::<serde_json::Value>(&path).unwrap()["secret"], "s3cret");
        write_private(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["grid.json"], "no temporary file left");
        let e = write_private(&dir.join("missing-dir").join("x"), b"x").unwrap_err();
        assert!(format!("{e:#}").contains("missing-dir/x"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_pid_is_alive_and_a_dead_one_is_not() {
        assert!(pid_alive(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
