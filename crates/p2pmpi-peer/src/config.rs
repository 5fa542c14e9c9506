//! The `P2P-MPI.conf` configuration file (thesis appendix C.1, table C.1; SPEC §15).
//!
//! # Format
//!
//! One `KEY=VALUE` per line; spaces around the key and the value are trimmed. Blank lines and
//! lines whose first non-blank character is `#` are ignored. A value may be empty: an empty list
//! key gives an empty list, an empty optional key leaves it unset (but `GRID_SECRET=` gives an
//! empty secret, which the commands treat as unset). Problems are reported with the file and line:
//!
//! * a line without `=`, or a bad value, is an error ([`ConfigError`]), e.g.
//!   `P2P-MPI.conf line 7: MAX_JOBS: "-1" is not a non-negative integer`;
//! * an unknown key, or a key given twice (the last value wins), is a [`Warning`] naming the key
//!   and, for a key given twice, both lines: `P2P-MPI.conf line 9: MAX_JOBS: given again (first
//!   on line 4); the last value wins`.
//!
//! Sizes (`FT_CACHE_MAX`, `FT_FETCH_MAX`) are bytes, or a number followed by `K`, `M`, `G` or `T`
//! (also `KiB` … `TiB`; binary multiples: `512M`, `4G`).
//!
//! Addresses (`SUPERNODE`, `VISU_PROXY`) are written `tcp://host:port`, `host:port` or `host`
//! (IPv6 as `[addr]:port`) and stored normalized as `host:port`.
//!
//! # Where the file is found ([`Config::load`])
//!
//! 1. the file named by the environment variable `P2PMPI_CONF_FILE`, if set (it must be readable);
//! 2. else `<p2pmpi dir>/P2P-MPI.conf` if it exists, where the p2pmpi directory ([`p2pmpi_dir`]) is
//!    `P2PMPI_HOME` if set, else `$HOME/.p2pmpi` — no administrator rights are needed;
//! 3. else the built-in defaults.
//!
//! # Keys
//!
//! | Key | Default | Meaning |
//! |-----|---------|---------|
//! | **Bootstrap** | | |
//! | `SUPERNODE` | `127.0.0.1:9700` | comma list of supernodes (port defaults to 9700); several replicate the JEL registry with Raft (the same list, in the same order, on each) |
//! | `VISU_PROXY` | unset | the visualisation proxy (port defaults to 9701) |
//! | **Local machine** | | |
//! | `MPD_PORT`, `FT_PORT`, `FD_PORT`, `RS_PORT` | 9897, 9898, 9899, 9900 | service ports (0: any free port) |
//! | `MIN_PORT`, `MAX_PORT` | 9801, 9900 | port range of MPI applications (`MIN_PORT <= MAX_PORT`) |
//! | `EXTERNAL_IP` | unset | address advertised to others (behind NAT or a firewall) |
//! | `HOST_DENY` | empty | comma list of IPs or prefixes ending with `.` (`192.168.0.`) not allowed to run here |
//! | **Resource contribution** | | |
//! | `MAX_PROCESSES_PER_JOB` | 1 | processes of one application on this host (≥ 1) |
//! | `MAX_JOBS` | 0 | applications running here at once (0: unlimited) |
//! | **Fault detector** | | |
//! | `T_GOSSIP` | 500 | gossip period, milliseconds (≥ 1; the thesis text says µs) |
//! | `T_MAX_HANG` | 5000 | extra time before a silent process is declared dead, ms |
//! | `GOSSIP_PROTOCOL` | `DBRR` | `DBRR` (double binary round-robin), `BRR`, `RR` (round-robin), `RANDOM`, or `KMONITOR` (the k-monitor detector instead of gossip) |
//! | `K_MONITORS` | 4 | k-monitor: monitors per process (≥ 1) |
//! | `T_HB` | 100 | k-monitor: heartbeat period, ms (≥ 1) |
//! | `T_TO` | 1000 | k-monitor: silence after which a monitored process has failed, ms (> `T_HB`) |
//! | `PEER_CACHE` | `<p2pmpi dir>/peer-cache.json` | the MPD's cached host list |
//! | **Beyond the seeds** | | |
//! | `GRID_SECRET` | unset | phrase shared by every daemon and command of one grid (needed to boot) |
//! | `HOST_ALLOW` | empty | like `HOST_DENY`; if non-empty, only these hosts may run here |
//! | `SUBMIT_ALLOW` | empty | comma list of member names (member keys, see `docs/security.md`) whose jobs may run here; empty: every member with the `submit` role |
//! | `PEER_TTL` | 60000 | a supernode drops peers not heard of for this long, ms (≥ 1) |
//! | `ALIVE_PERIOD` | 10000 | period of a peer's keep-alive to the supernodes, ms (≥ 1) |
//! | `CACHE_REFRESH` | 30000 | period at which the MPD refreshes its host list, ms (≥ 1) |
//! | `PING_PERIOD` | 10000 | period at which the MPD measures RTTs to cached hosts, ms (≥ 1) |
//! | `RESERVE_TIMEOUT` | 2000 | a remote RS silent this long is marked dead, ms (≥ 1) |
//! | `RESERVATION_HOLD` | 30000 | an unused reservation lapses after this, ms (≥ 1) |
//! | `STAGING_FANOUT` | 8 | peers receiving files at once (≥ 1) |
//! | `SUPERNODE_PORT` | 9700 | port of a supernode started on this host (0: any free port) |
//! | `FT_CACHE_MAX` | `1G` | the FT cache keeps at most this many bytes: least recently used entries are evicted after a staging (never one a running staging uses); an offer whose content to receive does not fit is refused before the transfer |
//! | `FT_FETCH_MAX` | `4G` | largest `http://` input the FT fetches, bytes (≥ 1) |
//! | `FT_JOB_MAX` | `4G` | most bytes the FT stages for one job, its inline files together (≥ 1): a larger offer is refused before anything is written |
//! | `CHECKPOINT_MAX` | `4G` | most bytes of checkpoints the FT keeps for one job of the grid (≥ 1), every generation together (it must hold two: the next is written before the last is deleted); a chunk beyond it is refused and the job's checkpoint reports the quota |
//! | `JOB_READ_PATHS` | (none) | comma list of paths that confined jobs may read and execute besides the system's (e.g. a shared Python environment); see `docs/security.md` |
//! | `JOB_HIDDEN_ETC` | `shadow,gshadow,shadow-,gshadow-,ssh,sudoers,sudoers.d,p2pmpi` | entries of `/etc` that confined jobs may not read (they may read the others) |
//! | `JOB_MEMORY_MB` | 0 | address space of each process of another member's job, MiB (0: no limit) |
//! | `JOB_CPU_SECONDS` | 0 | CPU time of each such process, s (0: no limit) |
//! | `JOB_FILE_MB` | 0 | largest file such a process may write, MiB (0: no limit) |
//! | `JOB_PROCESSES` | 0 | processes (and threads) per process started for a job: counted for the whole job in a control group of its own where the daemon can make one, else per user (0: no limit; see `docs/security.md`) |
//! | `JOB_CONNECT_PORTS` | (none) | TCP ports that confined jobs may connect to besides `MIN_PORT`..`MAX_PORT` and their launcher's port, a comma list of ports and ranges `A-B` (for grids whose hosts use other ranges); `any`: no restriction |
//! | `ALLOW_UNCONFINED_JOBS` | `no` | `yes`: run other members' jobs even where the kernel has no Landlock (unconfined) |
//! | `JOB_UIDS` | `2100000000-2100065535` | when the daemon runs as root: the range of user ids its jobs run as, `FIRST-LAST` (one per job, no account needed; the job directories must be reachable by other users, see `docs/security.md`); a daemon as root never runs a job as root |
//! | `JOB_LANDLOCK_ABI` | (the kernel's) | the highest Landlock ABI used (tests force a lower one; 0 acts as a kernel without Landlock) |
//! | `LOG_LEVEL` | `info` | what the daemons log: `error`, `warn`, `info`, `debug`, `trace` or `off`, or directives such as `info,p2pmpi_peer::mpd=debug`; the environment variable `RUST_LOG`, when set, wins |

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Name of the configuration file inside the p2pmpi directory.
pub const CONF_FILE_NAME: &str = "P2P-MPI.conf";
/// Port of a `SUPERNODE` entry that gives none.
pub const DEFAULT_SUPERNODE_PORT: u16 = 9700;
/// Port of a `VISU_PROXY` that gives none.
pub const DEFAULT_VISU_PROXY_PORT: u16 = 9701;
/// Default `JOB_HIDDEN_ETC`: the entries of `/etc` that hold secrets.
pub const DEFAULT_JOB_HIDDEN_ETC: &[&str] =
    &["shadow", "gshadow", "shadow-", "gshadow-", "ssh", "sudoers", "sudoers.d", "p2pmpi"];
/// A `JOB_UIDS` range that suits most hosts: 65 536 user ids far above those of accounts and
/// of user namespaces' usual subordinate ranges.
pub const SUGGESTED_JOB_UIDS: (u32, u32) = (2_100_000_000, 2_100_065_535);
/// Default `FT_CACHE_MAX`: 1 GiB.
pub const DEFAULT_FT_CACHE_MAX: u64 = 1 << 30;
/// Default `FT_FETCH_MAX`: 4 GiB.
pub const DEFAULT_FT_FETCH_MAX: u64 = 4 << 30;
/// Default `FT_JOB_MAX`: 4 GiB.
pub const DEFAULT_FT_JOB_MAX: u64 = 4 << 30;
/// Default `CHECKPOINT_MAX`: 4 GiB.
pub const DEFAULT_CHECKPOINT_MAX: u64 = 4 << 30;

/// The fault detector's gossip protocol (`GOSSIP_PROTOCOL`): `DBRR` (default), `BRR`, `RR` or
/// `RANDOM`, chosen per application by its submitter.
pub use p2pmpi_core::fd::Protocol as GossipProtocol;

/// The configuration of a host. Keys of the original (thesis table C.1) first, then keys beyond
/// the seeds:
///
/// * `GRID_SECRET` ([`grid_secret`](Self::grid_secret), default unset): shared by every daemon
///   and command of a grid; required to boot (checked by the callers, not here).
/// * `HOST_ALLOW` ([`host_allow`](Self::host_allow), default empty = everyone).
/// * `SUBMIT_ALLOW` ([`submit_allow`](Self::submit_allow), default empty = every member with
///   the `submit` role).
/// * `PEER_TTL` ([`peer_ttl_ms`](Self::peer_ttl_ms), default 60000 ms).
/// * `ALIVE_PERIOD` ([`alive_period_ms`](Self::alive_period_ms), default 10000 ms).
/// * `CACHE_REFRESH` ([`refresh_period_ms`](Self::refresh_period_ms), default 30000 ms).
/// * `PING_PERIOD` ([`ping_period_ms`](Self::ping_period_ms), default 10000 ms).
/// * `RESERVE_TIMEOUT` ([`reserve_timeout_ms`](Self::reserve_timeout_ms), default 2000 ms).
/// * `RESERVATION_HOLD` ([`reservation_hold_ms`](Self::reservation_hold_ms), default 30000 ms).
/// * `STAGING_FANOUT` ([`staging_fanout`](Self::staging_fanout), default 8).
/// * `SUPERNODE_PORT` ([`supernode_port`](Self::supernode_port), default 9700).
/// * `FT_CACHE_MAX` ([`ft_cache_max`](Self::ft_cache_max), default 1 GiB).
/// * `FT_FETCH_MAX` ([`ft_fetch_max`](Self::ft_fetch_max), default 4 GiB).
/// * `FT_JOB_MAX` ([`ft_job_max`](Self::ft_job_max), default 4 GiB).
/// * `CHECKPOINT_MAX` ([`checkpoint_max`](Self::checkpoint_max), default 4 GiB).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `SUPERNODE`: supernodes as `host:port` (default `127.0.0.1:9700`).
    pub supernodes: Vec<String>,
    /// `VISU_PROXY`: the visualisation proxy as `host:port` (default none).
    pub visu_proxy: Option<String>,
    /// `MPD_PORT` (default 9897; 0 = any free port).
    pub mpd_port: u16,
    /// `FT_PORT` (default 9898).
    pub ft_port: u16,
    /// `FD_PORT` (default 9899).
    pub fd_port: u16,
    /// `RS_PORT` (default 9900).
    pub rs_port: u16,
    /// `MIN_PORT`: lowest port of MPI applications (default 9801).
    pub min_port: u16,
    /// `MAX_PORT`: highest port of MPI applications (default 9900).
    pub max_port: u16,
    /// `EXTERNAL_IP`: the address advertised to others (default: found automatically).
    pub external_ip: Option<IpAddr>,
    /// `MAX_PROCESSES_PER_JOB` (default 1, at least 1).
    pub max_processes_per_job: u32,
    /// `MAX_JOBS` (default 0 = unlimited).
    pub max_jobs: u32,
    /// `HOST_DENY`: IPs, or prefixes ending with `.`, not allowed to run here (default empty).
    pub host_deny: Vec<String>,
    /// `HOST_ALLOW`: if non-empty, only these IPs or prefixes may run here (default empty).
    pub host_allow: Vec<String>,
    /// `T_GOSSIP`, milliseconds (default 500, at least 1).
    pub t_gossip_ms: u64,
    /// `T_MAX_HANG`, milliseconds (default 5000).
    pub t_max_hang_ms: u64,
    /// `GOSSIP_PROTOCOL` (default DBRR).
    pub gossip_protocol: GossipProtocol,
    /// `GOSSIP_PROTOCOL=KMONITOR`: jobs use the k-monitor detector instead of gossip (default
    /// false).
    pub kmonitor: bool,
    /// `K_MONITORS`: the k-monitor detector's monitors per process (default 4, at least 1).
    pub k_monitors: u32,
    /// `T_HB`: the k-monitor detector's heartbeat period, ms (default 100, at least 1).
    pub t_hb_ms: u64,
    /// `T_TO`: the k-monitor detector's time-out, ms (default 1000, more than `T_HB`).
    pub t_to_ms: u64,
    /// `T_HB_WIDE`: the k-monitor detector's heartbeat period on connections between clusters
    /// (Horita's `T'_hb`), ms (default: `T_HB`).
    pub t_hb_wide_ms: Option<u64>,
    /// `T_TO_WIDE`: its time-out on connections between clusters (`T'_to`), ms (default:
    /// `T_TO`; more than the wide heartbeat period).
    pub t_to_wide_ms: Option<u64>,
    /// `WIDE_REFUSALS`: connections to another cluster refused (NAT, firewall) before a
    /// process leaves it to the others to connect (default 3, at least 1).
    pub wide_refusals: u32,
    /// `PEER_CACHE` (default `<p2pmpi dir>/peer-cache.json`, see [`Config::peer_cache_path`]).
    pub peer_cache: Option<PathBuf>,
    /// `GRID_SECRET`: the grid's shared secret (default none).
    pub grid_secret: Option<String>,
    /// `SUBMIT_ALLOW`: member names whose jobs may run here (default empty: every member whose
    /// certificate has the `submit` role).
    pub submit_allow: Vec<String>,
    /// `PEER_TTL`: a supernode drops peers not seen for this long, ms (default 60000).
    pub peer_ttl_ms: u64,
    /// `ALIVE_PERIOD`: peer keep-alive period to the supernodes, ms (default 10000).
    pub alive_period_ms: u64,
    /// `CACHE_REFRESH`: the MPD refreshes its cached list from supernodes this often, ms (default 30000).
    pub refresh_period_ms: u64,
    /// `PING_PERIOD`: the MPD measures RTTs to cached hosts this often, ms (default 10000).
    pub ping_period_ms: u64,
    /// `RESERVE_TIMEOUT`: a remote RS silent this long is marked dead, ms (default 2000).
    pub reserve_timeout_ms: u64,
    /// `RESERVATION_HOLD`: an unused reservation lapses after this, ms (default 30000).
    pub reservation_hold_ms: u64,
    /// `STAGING_FANOUT`: peers staged at once (default 8, at least 1).
    pub staging_fanout: u32,
    /// `SUPERNODE_PORT`: port of a supernode started on this host (default 9700; 0 = any free port).
    pub supernode_port: u16,
    /// `FT_CACHE_MAX`: bytes the FT cache keeps; least recently used entries are evicted
    /// (default 1 GiB; 0 keeps nothing after a staging). An offer whose content to receive
    /// does not fit it is refused before the transfer, so with 0 only content already staged
    /// in a running staging or `http://` inputs can be staged.
    pub ft_cache_max: u64,
    /// `FT_FETCH_MAX`: largest `http://` input fetched, bytes (default 4 GiB, at least 1).
    pub ft_fetch_max: u64,
    /// `FT_JOB_MAX`: most bytes of inline files staged for one job (default 4 GiB, at least 1).
    pub ft_job_max: u64,
    /// `CHECKPOINT_MAX`: most bytes of checkpoints kept for one job (default 4 GiB, at least 1).
    pub checkpoint_max: u64,
    /// `JOB_READ_PATHS`: paths confined jobs may read and execute besides the system's.
    pub job_read_paths: Vec<PathBuf>,
    /// `JOB_HIDDEN_ETC`: entries of `/etc` confined jobs may not read.
    pub job_hidden_etc: Vec<String>,
    /// `JOB_MEMORY_MB`: address space of each confined process, MiB (0: no limit).
    pub job_memory_mb: u64,
    /// `JOB_CPU_SECONDS`: CPU time of each confined process, s (0: no limit).
    pub job_cpu_seconds: u64,
    /// `JOB_FILE_MB`: largest file a confined process may write, MiB (0: no limit).
    pub job_file_mb: u64,
    /// `JOB_PROCESSES`: processes (and threads) per process started for a job (0: no limit).
    pub job_processes: u64,
    /// `ALLOW_UNCONFINED_JOBS=yes`: other members' jobs run where Landlock is missing.
    pub allow_unconfined_jobs: bool,
    /// `JOB_LANDLOCK_ABI`: the highest Landlock ABI used (default: the kernel's).
    pub job_landlock_abi: Option<u32>,
    /// `JOB_UIDS`: the user ids jobs run as when the daemon runs as root (first, last;
    /// unset: [`SUGGESTED_JOB_UIDS`]).
    pub job_uids: Option<(u32, u32)>,
    /// `JOB_CONNECT_PORTS`: TCP port ranges confined jobs may connect to besides
    /// `MIN_PORT`..`MAX_PORT` and their launcher's port (`any`: 1-65535, not enforced).
    pub job_connect_ports: Vec<(u16, u16)>,
    /// `LOG_LEVEL`: the daemons' log filter (default none: `info`; `RUST_LOG` wins).
    pub log_level: Option<String>,
    /// File the values came from (None = built-in defaults).
    pub source: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            supernodes: vec![format!("127.0.0.1:{DEFAULT_SUPERNODE_PORT}")],
            visu_proxy: None,
            mpd_port: 9897,
            ft_port: 9898,
            fd_port: 9899,
            rs_port: 9900,
            min_port: 9801,
            max_port: 9900,
            external_ip: None,
            max_processes_per_job: 1,
            max_jobs: 0,
            host_deny: Vec::new(),
            host_allow: Vec::new(),
            t_gossip_ms: 500,
            t_max_hang_ms: 5000,
            gossip_protocol: GossipProtocol::Dbrr,
            kmonitor: false,
            k_monitors: 4,
            t_hb_ms: 100,
            t_to_ms: 1000,
            t_hb_wide_ms: None,
            t_to_wide_ms: None,
            wide_refusals: 3,
            peer_cache: None,
            grid_secret: None,
            submit_allow: Vec::new(),
            peer_ttl_ms: 60_000,
            alive_period_ms: 10_000,
            refresh_period_ms: 30_000,
            ping_period_ms: 10_000,
            reserve_timeout_ms: 2000,
            reservation_hold_ms: 30_000,
            staging_fanout: 8,
            supernode_port: DEFAULT_SUPERNODE_PORT,
            ft_cache_max: DEFAULT_FT_CACHE_MAX,
            ft_fetch_max: DEFAULT_FT_FETCH_MAX,
            ft_job_max: DEFAULT_FT_JOB_MAX,
            checkpoint_max: DEFAULT_CHECKPOINT_MAX,
            job_read_paths: Vec::new(),
            job_hidden_etc: DEFAULT_JOB_HIDDEN_ETC.iter().map(|s| s.to_string()).collect(),
            job_memory_mb: 0,
            job_cpu_seconds: 0,
            job_file_mb: 0,
            job_processes: 0,
            allow_unconfined_jobs: false,
            job_landlock_abi: None,
            job_uids: None,
            job_connect_ports: Vec::new(),
            log_level: None,
            source: None,
        }
    }
}

/// A problem that does not stop parsing (unknown key, key given twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file, as named in messages.
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}: {}: {}", self.file, self.line, self.key, self.message)
    }
}

/// A bad configuration: the file, the line (0 when the file itself is the problem), the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file} line {line}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

/// Parses a non-negative integer in `min..=max`.
fn uint(v: &str, min: u64, max: u64) -> Result<u64, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{v:?} is not a non-negative integer"));
    }
    let n = v.parse::<u64>().ok().filter(|n| *n <= max).ok_or_else(|| format!("{v:?} is too large (at most {max})"))?;
    if n < min {
        return Err(format!("{v:?} must be at least {min}"));
    }
    Ok(n)
}

fn port(v: &str) -> Result<u16, String> {
    v.parse::<u16>()
        .ok()
        .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("{v:?} is not a port number (0 to 65535)"))
}

fn u32_at_least(v: &str, min: u64) -> Result<u32, String> {
    uint(v, min, u32::MAX.into()).map(|n| n as u32)
}

/// Parses a size: bytes, or a number followed by `K`, `M`, `G` or `T` (or `KiB` … `TiB`;
/// binary multiples), at least `min`.
fn size(v: &str, min: u64) -> Result<u64, String> {
    let bad = || format!("{v:?} is not a size (bytes, or a number followed by K, M, G or T, such as 512M or 4G)");
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = v.split_at(digits);
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" | "KIB" => 10,
        "M" | "MIB" => 20,
        "G" | "GIB" => 30,
        "T" | "TIB" => 40,
        _ => return Err(bad()),
    };
    if number.is_empty() {
        return Err(bad());
    }
    let n = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{v:?} is too large (at most {} bytes)", u64::MAX))?;
    if n < min {
        return Err(format!("{v:?} must be at least {min}"));
    }
    Ok(n)
}

/// Writes a size as [`size`] reads it: with the largest unit that divides it exactly.
pub fn size_text(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n != 0 && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Normalizes `tcp://host:port`, `host:port` or `host` to `host:port`.
fn address(entry: &str, default_port: u16) -> Result<String, String> {
    let bad = || format!("{entry:?} is not an address (tcp://host:port, host:port or host)");
    let rest = match entry.find("://") {
        Some(i) if entry[..i].eq_ignore_ascii_case("tcp") => &entry[i + 3..],
        Some(_) => return Err(format!("{entry:?}: only tcp:// addresses are supported")),
        None => entry,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port_text) = if let Some(r) = rest.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or_else(bad)?;
        let ip: Ipv6Addr = h.parse().map_err(|_| bad())?;
        let p = if after.is_empty() { None } else { Some(after.strip_prefix(':').ok_or_else(bad)?) };
        (format!("[{ip}]"), p)
    } else if let Ok(ip) = rest.parse::<Ipv6Addr>() {
        (format!("[{ip}]"), None)
    } else {
        let (h, p) = match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if h.is_empty() || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
            return Err(bad());
        }
        (h.to_string(), p)
    };
    let port = match port_text {
        None => default_port,
        Some(p) => match port(p) {
            Ok(0) => return Err(format!("{entry:?}: port 0 cannot be connected to")),
            Ok(n) => n,
            Err(_) => return Err(bad()),
        },
    };
    Ok(format!("{host}:{port}"))
}

/// Splits a comma list (empty value = empty list; empty entries are errors).
fn list<T>(v: &str, each: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    if v.is_empty() {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(str::trim)
        .map(|e| if e.is_empty() { Err(format!("empty entry in {v:?}")) } else { each(e) })
        .collect()
}

/// A `SUBMIT_ALLOW` entry: a member name.
fn member_name(e: &str) -> Result<String, String> {
    p2pmpi_wire::identity::valid_name(e).map_err(|err| err.to_string())?;
    Ok(e.to_string())
}

/// A `HOST_DENY` / `HOST_ALLOW` entry: an IP, or a prefix ending with `.` (or `:` for IPv6).
fn host_pattern(e: &str) -> Result<String, String> {
    let bad = || format!("{e:?} is neither an IP address nor a prefix ending with '.' (such as 192.168.0.)");
    if e.contains(':') {
        let ok = e.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        return if ok { Ok(e.to_string()) } else { Err(bad()) };
    }
    let (body, prefix) = match e.strip_suffix('.') {
        Some(b) => (b, true),
        None => (e, false),
    };
    let parts: Vec<&str> = body.split('.').collect();
    let count_ok = if prefix { parts.len() <= 3 } else { parts.len() == 4 };
    let parts_ok = parts
        .iter()
        .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u8>().is_ok());
    if count_ok && parts_ok {
        Ok(e.to_string())
    } else {
        Err(bad())
    }
}

/// A `LOG_LEVEL` value: comma-separated `LEVEL` or `TARGET=LEVEL` directives (the syntax of
/// `RUST_LOG`, without spans or fields).
fn log_filter(v: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    for d in v.split(',').map(str::trim) {
        let level = match d.rsplit_once('=') {
            Some((target, level)) => {
                let ok = !target.is_empty() && target.chars().all(|c| c.is_ascii_alphanumeric() || "_:-".contains(c));
                if !ok {
                    return Err(format!("{d:?}: {target:?} is not a module path"));
                }
                level
            }
            None => d,
        };
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!("{d:?}: the level must be one of error, warn, info, debug, trace, off"));
        }
    }
    Ok(v.to_string())
}

fn optional(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

/// Every key [`apply`] knows, for the "did you mean" of an unknown key.
pub const KEYS: &[&str] = &[
    "SUPERNODE",
    "VISU_PROXY",
    "MPD_PORT",
    "FT_PORT",
    "FD_PORT",
    "RS_PORT",
    "MIN_PORT",
    "MAX_PORT",
    "EXTERNAL_IP",
    "MAX_PROCESSES_PER_JOB",
    "MAX_JOBS",
    "HOST_DENY",
    "HOST_ALLOW",
    "T_GOSSIP",
    "T_MAX_HANG",
    "GOSSIP_PROTOCOL",
    "K_MONITORS",
    "T_HB",
    "T_TO",
    "T_HB_WIDE",
    "T_TO_WIDE",
    "WIDE_REFUSALS",
    "PEER_CACHE",
    "GRID_SECRET",
    "PEER_TTL",
    "ALIVE_PERIOD",
    "CACHE_REFRESH",
    "PING_PERIOD",
    "RESERVE_TIMEOUT",
    "RESERVATION_HOLD",
    "STAGING_FANOUT",
    "SUPERNODE_PORT",
    "FT_CACHE_MAX",
    "FT_FETCH_MAX",
    "FT_JOB_MAX",
    "CHECKPOINT_MAX",
    "SUBMIT_ALLOW",
    "LOG_LEVEL",
    "JOB_READ_PATHS",
    "JOB_HIDDEN_ETC",
    "JOB_MEMORY_MB",
    "JOB_CPU_SECONDS",
    "JOB_FILE_MB",
    "JOB_PROCESSES",
    "ALLOW_UNCONFINED_JOBS",
    "JOB_UIDS",
    "JOB_CONNECT_PORTS",
    "JOB_LANDLOCK_ABI",
];

/// The known key nearest to an unknown one (a typo, a lower-case key, a missing letter or
/// two), if any is near enough to be meant.
pub fn nearest_key(key: &str) -> Option<&'static str> {
    let upper = key.to_ascii_uppercase();
    let (best, d) = KEYS.iter().map(|k| (*k, edit_distance(&upper, k))).min_by_key(|(_, d)| *d)?;
    (d <= (best.len() / 4).clamp(1, 3)).then_some(best)
}

/// Levenshtein distance between two ASCII strings (bytes).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (diag + usize::from(ca != cb)).min(up + 1).min(row[j] + 1);
            diag = up;
        }
    }
    row[b.len()]
}

/// Parses `yes` or `no` (any case; also `true`/`false`, `1`/`0`).
fn yes_no(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(format!("{v:?} is neither yes nor no")),
    }
}

/// Parses a range of user ids `FIRST-LAST` (not root's, FIRST ≤ LAST).
fn uid_range(v: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{v:?} is not a range of user ids FIRST-LAST (such as 2100000000-2100065535)");
    let (a, b) = v.split_once('-').ok_or_else(bad)?;
    let a = uint(a.trim(), 1, u32::MAX as u64 - 1).map_err(|_| bad())? as u32;
    let b = uint(b.trim(), 1, u32::MAX as u64 - 1).map_err(|_| bad())? as u32;
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// Parses a comma list of TCP ports and ranges `A-B` (`any`: every port).
fn port_ranges(v: &str) -> Result<Vec<(u16, u16)>, String> {
    if v.trim().eq_ignore_ascii_case("any") {
        return Ok(vec![(1, u16::MAX)]);
    }
    let bad = |p: &str| format!("{p:?} is not a port or a range of ports A-B (1 to 65535)");
    let one = |p: &str| p.trim().parse::<u16>().ok().filter(|&n| n > 0).ok_or_else(|| bad(p));
    let mut out = Vec::new();
    for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match p.split_once('-') {
            Some((a, b)) => (one(a)?, one(b)?),
            None => (one(p)?, one(p)?),
        };
        if a > b {
            return Err(bad(p));
        }
        out.push((a, b));
    }
    Ok(out)
}

/// Parses an absolute path.
fn absolute_path(v: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(v);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(format!("{v:?} is not an absolute path"))
    }
}

/// Parses the name of one entry of `/etc`.
fn etc_entry(v: &str) -> Result<String, String> {
    if v.is_empty() || v.contains('/') || v == "." || v == ".." {
        return Err(format!("{v:?} is not the name of an entry of /etc"));
    }
    Ok(v.to_string())
}

/// Sets one key; Ok(false) if the key is unknown, Err(message) if the value is bad.
fn apply(c: &mut Config, key: &str, v: &str) -> Result<bool, String> {
    match key {
        "SUPERNODE" => c.supernodes = list(v, |e| address(e, DEFAULT_SUPERNODE_PORT))?,
        "VISU_PROXY" => c.visu_proxy = optional(v).map(|v| address(v, DEFAULT_VISU_PROXY_PORT)).transpose()?,
        "MPD_PORT" => c.mpd_port = port(v)?,
        "FT_PORT" => c.ft_port = port(v)?,
        "FD_PORT" => c.fd_port = port(v)?,
        "RS_PORT" => c.rs_port = port(v)?,
        "MIN_PORT" => c.min_port = port(v)?,
        "MAX_PORT" => c.max_port = port(v)?,
        "EXTERNAL_IP" => {
            c.external_ip =
                optional(v).map(|v| v.parse().map_err(|_| format!("{v:?} is not an IP address"))).transpose()?
        }
        "MAX_PROCESSES_PER_JOB" => c.max_processes_per_job = u32_at_least(v, 1)?,
        "MAX_JOBS" => c.max_jobs = u32_at_least(v, 0)?,
        "HOST_DENY" => c.host_deny = list(v, host_pattern)?,
        "HOST_ALLOW" => c.host_allow = list(v, host_pattern)?,
        "T_GOSSIP" => c.t_gossip_ms = uint(v, 1, u64::MAX)?,
        "T_MAX_HANG" => c.t_max_hang_ms = uint(v, 0, u64::MAX)?,
        "GOSSIP_PROTOCOL" if v.eq_ignore_ascii_case("KMONITOR") => c.kmonitor = true,
        "GOSSIP_PROTOCOL" => {
            c.gossip_protocol = v.parse().map_err(|e: String| format!("{e}, or KMONITOR"))?;
            c.kmonitor = false;
        }
        "K_MONITORS" => c.k_monitors = u32_at_least(v, 1)?,
        "T_HB" => c.t_hb_ms = uint(v, 1, u64::MAX)?,
        "T_TO" => c.t_to_ms = uint(v, 2, u64::MAX)?,
        "T_HB_WIDE" => c.t_hb_wide_ms = optional(v).map(|v| uint(v, 1, u64::MAX)).transpose()?,
        "T_TO_WIDE" => c.t_to_wide_ms = optional(v).map(|v| uint(v, 2, u64::MAX)).transpose()?,
        "WIDE_REFUSALS" => c.wide_refusals = u32_at_least(v, 1)?,
        "PEER_CACHE" => c.peer_cache = optional(v).map(PathBuf::from),
        "GRID_SECRET" => c.grid_secret = Some(v.to_string()),
        "SUBMIT_ALLOW" => c.submit_allow = list(v, member_name)?,
        "PEER_TTL" => c.peer_ttl_ms = uint(v, 1, u64::MAX)?,
        "ALIVE_PERIOD" => c.alive_period_ms = uint(v, 1, u64::MAX)?,
        "CACHE_REFRESH" => c.refresh_period_ms = uint(v, 1, u64::MAX)?,
        "PING_PERIOD" => c.ping_period_ms = uint(v, 1, u64::MAX)?,
        "RESERVE_TIMEOUT" => c.reserve_timeout_ms = uint(v, 1, u64::MAX)?,
        "RESERVATION_HOLD" => c.reservation_hold_ms = uint(v, 1, u64::MAX)?,
        "STAGING_FANOUT" => c.staging_fanout = u32_at_least(v, 1)?,
        "SUPERNODE_PORT" => c.supernode_port = port(v)?,
        "FT_CACHE_MAX" => c.ft_cache_max = size(v, 0)?,
        "FT_FETCH_MAX" => c.ft_fetch_max = size(v, 1)?,
        "FT_JOB_MAX" => c.ft_job_max = size(v, 1)?,
        "CHECKPOINT_MAX" => c.checkpoint_max = size(v, 1)?,
        "LOG_LEVEL" => c.log_level = optional(v).map(log_filter).transpose()?,
        "JOB_READ_PATHS" => c.job_read_paths = list(v, absolute_path)?,
        "JOB_HIDDEN_ETC" => c.job_hidden_etc = list(v, etc_entry)?,
        "JOB_MEMORY_MB" => c.job_memory_mb = uint(v, 0, u64::MAX >> 20)?,
        "JOB_CPU_SECONDS" => c.job_cpu_seconds = uint(v, 0, u64::MAX)?,
        "JOB_FILE_MB" => c.job_file_mb = uint(v, 0, u64::MAX >> 20)?,
        "JOB_PROCESSES" => c.job_processes = uint(v, 0, u64::MAX)?,
        "ALLOW_UNCONFINED_JOBS" => c.allow_unconfined_jobs = yes_no(v)?,
        "JOB_UIDS" => c.job_uids = optional(v).map(uid_range).transpose()?,
        "JOB_CONNECT_PORTS" => c.job_connect_ports = port_ranges(v)?,
        "JOB_LANDLOCK_ABI" => c.job_landlock_abi = optional(v).map(|v| uint(v, 0, 64).map(|n| n as u32)).transpose()?,
        _ => return Ok(false),
    }
    Ok(true)
}

impl Config {
    /// The value of `P2PMPI_PORTS` for the processes of jobs: `MIN_PORT-MAX_PORT`, then `!` and
    /// the service ports inside that range, which a job's process must not listen on (confined
    /// processes may not connect to them; the failure detector's is UDP only, so its TCP port
    /// would look free).
    pub fn job_ports(&self) -> String {
        let (lo, hi) = (self.min_port, self.max_port);
        let mut skip: Vec<u16> = [self.mpd_port, self.ft_port, self.fd_port, self.rs_port]
            .into_iter()
            .filter(|p| *p != 0 && (lo..=hi).contains(p))
            .collect();
        skip.sort_unstable();
        skip.dedup();
        if skip.is_empty() {
            format!("{lo}-{hi}")
        } else {
            format!("{lo}-{hi}!{}", skip.iter().map(u16::to_string).collect::<Vec<_>>().join(","))
        }
    }

    /// Parses text; `origin` names the file in messages (and becomes [`Config::source`]).
    pub fn parse(text: &str, origin: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
        let file = origin.display().to_string();
        let error = |line: usize, key: &str, message: String| ConfigError {
            file: file.clone(),
            line,
            key: key.to_string(),
            message,
        };
        let mut cfg = Config { source: Some(origin.to_path_buf()), ..Config::default() };
        let mut warnings = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                let shown: String = line.chars().take(40).collect();
                return Err(error(n, &shown, "not a KEY=VALUE line (no '=')".into()));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(error(n, "", "no key before '='".into()));
            }
            let warn = |message: String| Warning { file: file.clone(), line: n, key: key.to_string(), message };
            match apply(&mut cfg, key, value) {
                Err(m) => return Err(error(n, key, m)),
                Ok(false) => warnings.push(warn(match nearest_key(key) {
                    Some(k) => format!("unknown key, ignored (did you mean {k}?)"),
                    None => "unknown key, ignored".into(),
                })),
                Ok(true) => {
                    if let Some(first) = seen.insert(key.to_string(), n) {
                        warnings.push(warn(format!("given again (first on line {first}); the last value wins")));
                    }
                }
            }
        }
        if cfg.min_port > cfg.max_port {
            let (key, line) = match (seen.get("MAX_PORT"), seen.get("MIN_PORT")) {
                (Some(l), _) => ("MAX_PORT", *l),
                (None, Some(l)) => ("MIN_PORT", *l),
                (None, None) => ("MAX_PORT", 0),
            };
            let m = format!("MIN_PORT {} is above MAX_PORT {}: no port for applications", cfg.min_port, cfg.max_port);
            return Err(error(line, key, m));
        }
        Ok((cfg, warnings))
    }

    /// Finds and reads the configuration: the file named by `P2PMPI_CONF_FILE` if set (an error
    /// with line 0 and key `P2PMPI_CONF_FILE` if it cannot be read), else
    /// `<p2pmpi_dir()>/P2P-MPI.conf` if it exists, else the defaults (source None). Warnings are
    /// returned, not printed.
    pub fn load() -> Result<(Config, Vec<Warning>), ConfigError> {
        if let Some(named) = std::env::var_os("P2PMPI_CONF_FILE").filter(|v| !v.is_empty()) {
            return Config::load_file(Path::new(&named)).map_err(|e| {
                if e.line == 0 {
                    ConfigError { key: "P2PMPI_CONF_FILE".into(), ..e }
                } else {
                    e
                }
            });
        }
        let path = p2pmpi_dir().join(CONF_FILE_NAME);
        if path.exists() {
            Config::load_file(&path)
        } else {
            Ok((Config::default(), Vec::new()))
        }
    }

    /// Reads and parses one file; an unreadable file is an error with line 0.
    pub fn load_file(path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: 0,
            key: "file".into(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Renders a complete file with every key, grouped in the sections of the thesis' table C.1,
    /// such that `parse(to_text())` gives `self` back (but for `source`). Unset optional keys are
    /// written commented out.
    pub fn to_text(&self) -> String {
        fn opt(key: &str, v: Option<String>, example: &str) -> String {
            match v {
                Some(v) => format!("{key}={v}\n"),
                None => format!("#{key}={example}\n"),
            }
        }
        let mut t = String::new();
        t.push_str("# P2P-MPI.conf: KEY=VALUE lines; '#' starts a comment line. Times are in milliseconds.\n");
        t.push_str("\n# Bootstrap: supernodes (comma list of tcp://host:port) and the optional visu proxy.\n");
        t.push_str(&format!("SUPERNODE={}\n", self.supernodes.join(",")));
        t.push_str(&opt("VISU_PROXY", self.visu_proxy.clone(), "host:9701"));
        t.push_str("\n# Local machine: service ports (0 = any free port), application port range,\n");
        t.push_str("# address seen by others, hosts (IPs or prefixes ending with '.') denied here.\n");
        t.push_str(&format!("MPD_PORT={}\nFT_PORT={}\n", self.mpd_port, self.ft_port));
        t.push_str(&format!("FD_PORT={}\nRS_PORT={}\n", self.fd_port, self.rs_port));
        t.push_str(&format!("MIN_PORT={}\nMAX_PORT={}\n", self.min_port, self.max_port));
        t.push_str(&opt("EXTERNAL_IP", self.external_ip.map(|ip| ip.to_string()), "203.0.113.7"));
        t.push_str(&format!("HOST_DENY={}\n", self.host_deny.join(",")));
        t.push_str("\n# Resource contribution: processes per application, applications at once (0 = unlimited).\n");
        t.push_str(&format!("MAX_PROCESSES_PER_JOB={}\nMAX_JOBS={}\n", self.max_processes_per_job, self.max_jobs));
        t.push_str(
            "\n# Fault detector: gossip period, extra time before a death, DBRR, BRR, RR, RANDOM or KMONITOR;\n# the k-monitor detector's monitors, heartbeat period and time-out (ms); host cache file.\n",
        );
        t.push_str(&format!("T_GOSSIP={}\nT_MAX_HANG={}\n", self.t_gossip_ms, self.t_max_hang_ms));
        if self.kmonitor {
            t.push_str("GOSSIP_PROTOCOL=KMONITOR\n");
        } else {
            t.push_str(&format!("GOSSIP_PROTOCOL={}\n", self.gossip_protocol));
        }
        t.push_str(&format!("K_MONITORS={}\nT_HB={}\nT_TO={}\n", self.k_monitors, self.t_hb_ms, self.t_to_ms));
        t.push_str("# Between clusters (subnets): heartbeat period and time-out (default T_HB and T_TO),\n");
        t.push_str("# connections refused before leaving it to the other cluster to connect.\n");
        t.push_str(&opt("T_HB_WIDE", self.t_hb_wide_ms.map(|v| v.to_string()), "100"));
        t.push_str(&opt("T_TO_WIDE", self.t_to_wide_ms.map(|v| v.to_string()), "1000"));
        t.push_str(&format!("WIDE_REFUSALS={}\n", self.wide_refusals));
        t.push_str(&opt("PEER_CACHE", self.peer_cache.as_ref().map(|p| p.display().to_string()), "peer-cache.json"));
        t.push_str("\n# Beyond the seeds: the grid's shared secret, hosts allowed here (empty = everyone),\n");
        t.push_str("# supernode peer lifetime, MPD periods, reservation timeouts, staging fan-out,\n");
        t.push_str("# port of a supernode started here.\n");
        match &self.grid_secret {
            Some(s) => t.push_str(&format!("GRID_SECRET={s}\n")),
            None => t.push_str("#GRID_SECRET=<a long random phrase shared by the whole grid>\n"),
        }
        t.push_str(&format!("HOST_ALLOW={}\n", self.host_allow.join(",")));
        t.push_str("# Members (names, with member keys) whose jobs may run here; empty: every submitter.\n");
        t.push_str(&format!("SUBMIT_ALLOW={}\n", self.submit_allow.join(",")));
        t.push_str(&format!("PEER_TTL={}\nALIVE_PERIOD={}\n", self.peer_ttl_ms, self.alive_period_ms));
        t.push_str(&format!("CACHE_REFRESH={}\nPING_PERIOD={}\n", self.refresh_period_ms, self.ping_period_ms));
        t.push_str(&format!("RESERVE_TIMEOUT={}\n", self.reserve_timeout_ms));
        t.push_str(&format!("RESERVATION_HOLD={}\n", self.reservation_hold_ms));
        t.push_str(&format!("STAGING_FANOUT={}\nSUPERNODE_PORT={}\n", self.staging_fanout, self.supernode_port));
        t.push_str("# FT cache quota (least recently used entries are evicted), largest http:// input fetched,\n");
        t.push_str("# most bytes staged for one job;\n");
        t.push_str("# bytes, or with K, M, G or T.\n");
        t.push_str(&format!("FT_CACHE_MAX={}\n", size_text(self.ft_cache_max)));
        t.push_str(&format!("FT_FETCH_MAX={}\n", size_text(self.ft_fetch_max)));
        t.push_str(&format!("FT_JOB_MAX={}\n", size_text(self.ft_job_max)));
        t.push_str("# Most bytes of checkpoints kept here for one job of the grid (two generations).\n");
        t.push_str(&format!("CHECKPOINT_MAX={}\n", size_text(self.checkpoint_max)));
        t.push_str("\n# Confined jobs (other members' processes): paths they may read besides the system's,\n");
        t.push_str("# entries of /etc they may not read, limits of each process (0 = none), whether to run\n");
        t.push_str("# them unconfined on a kernel without Landlock (see docs/security.md).\n");
        let paths: Vec<String> = self.job_read_paths.iter().map(|p| p.display().to_string()).collect();
        t.push_str(&format!("JOB_READ_PATHS={}\nJOB_HIDDEN_ETC={}\n", paths.join(","), self.job_hidden_etc.join(",")));
        t.push_str(&format!("JOB_MEMORY_MB={}\nJOB_CPU_SECONDS={}\n", self.job_memory_mb, self.job_cpu_seconds));
        t.push_str(&format!("JOB_FILE_MB={}\nJOB_PROCESSES={}\n", self.job_file_mb, self.job_processes));
        t.push_str(&format!("ALLOW_UNCONFINED_JOBS={}\n", if self.allow_unconfined_jobs { "yes" } else { "no" }));
        t.push_str(&opt("JOB_LANDLOCK_ABI", self.job_landlock_abi.map(|v| v.to_string()), "7"));
        t.push_str("# User ids the jobs run as when the daemon runs as root (one per job).\n");
        let (a, b) = SUGGESTED_JOB_UIDS;
        t.push_str(&opt("JOB_UIDS", self.job_uids.map(|(a, b)| format!("{a}-{b}")), &format!("{a}-{b}")));
        t.push_str("# TCP ports jobs may connect to besides MIN_PORT..MAX_PORT and their launcher's (any: all).\n");
        let ports: Vec<String> = self.job_connect_ports.iter().map(|&(a, b)| format!("{a}-{b}")).collect();
        t.push_str(&format!("JOB_CONNECT_PORTS={}\n", ports.join(",")));
        t.push_str("# What the daemons log (error, warn, info, debug, trace; RUST_LOG wins when set).\n");
        t.push_str(&opt("LOG_LEVEL", self.log_level.clone(), "info"));
        t
    }

    /// `PEER_CACHE`, else `<p2pmpi_dir()>/peer-cache.json`.
    pub fn peer_cache_path(&self) -> PathBuf {
        self.peer_cache.clone().unwrap_or_else(|| p2pmpi_dir().join("peer-cache.json"))
    }
}

/// The user's p2pmpi directory: `P2PMPI_HOME` if set and non-empty, else `$HOME/.p2pmpi` (no
/// administrator rights needed; without `HOME`, the home of the user's account). Not created.
pub fn p2pmpi_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("P2PMPI_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(account_home);
    home.unwrap_or_else(|| PathBuf::from(".")).join(".p2pmpi")
}

/// The home directory of the current user from the password database.
fn account_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 4096];
    // (std::env::home_dir would do, but it returns an empty HOME as is rather than looking the
    // user up.)
    // SAFETY: `passwd` is a C struct of integers and raw pointers, for which all-zero bytes
    // are a valid value (null pointers); getpwuid_r fills it in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live, correctly sized storage; on success `out` points to
    // `pw`, whose strings live in `buf`, and are copied before `buf` is dropped.
    let rc = unsafe { libc::getpwuid_r(libc::getuid(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated string inside `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    let dir = std::ffi::OsStr::from_bytes(dir.to_bytes());
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NUMERIC: &str = "MPD_PORT FT_PORT FD_PORT RS_PORT MIN_PORT MAX_PORT MAX_PROCESSES_PER_JOB MAX_JOBS T_GOSSIP \
        T_MAX_HANG PEER_TTL ALIVE_PERIOD CACHE_REFRESH PING_PERIOD RESERVE_TIMEOUT RESERVATION_HOLD STAGING_FANOUT \
        SUPERNODE_PORT K_MONITORS T_HB T_TO WIDE_REFUSALS";
    const AT_LEAST_ONE: &str =
        "MAX_PROCESSES_PER_JOB K_MONITORS T_HB T_TO T_GOSSIP PEER_TTL ALIVE_PERIOD CACHE_REFRESH PING_PERIOD \
        RESERVE_TIMEOUT RESERVATION_HOLD STAGING_FANOUT WIDE_REFUSALS";
    const OTHER: &str =
        "SUPERNODE VISU_PROXY EXTERNAL_IP HOST_DENY HOST_ALLOW GOSSIP_PROTOCOL PEER_CACHE GRID_SECRET T_HB_WIDE T_TO_WIDE SUBMIT_ALLOW";
    const SIZES: &str = "FT_CACHE_MAX FT_FETCH_MAX FT_JOB_MAX";

    fn parse(text: &str) -> Result<(Config, Vec<Warning>), ConfigError> {
        Config::parse(text, Path::new("P2P-MPI.conf"))
    }
    #[test]
    fn jobs_leave_the_service_ports_inside_their_range_alone() {
        assert_eq!(parse_ok("").job_ports(), "9801-9900!9897,9898,9899,9900");
        assert_eq!(parse_ok("MIN_PORT=20000\nMAX_PORT=20100\n").job_ports(), "20000-20100");
        assert_eq!(parse_ok("FD_PORT=0\nMAX_PORT=9898\n").job_ports(), "9801-9898!9897,9898");
    }

    fn parse_ok(text: &str) -> Config {
        let (c, w) = parse(text).unwrap();
        assert!(w.is_empty(), "{w:?}");
        Config { source: None, ..c }
    }
    fn err_at(text: &str) -> (usize, String) {
        let e = parse(text).unwrap_err();
        (e.line, e.key)
    }

    /// Every field away from its default.
    fn non_default() -> Config {
        Config {
            supernodes: vec!["a.example:1".into(), "[::1]:9700".into(), "10.0.0.1:9700".into()],
            visu_proxy: Some("visu:9701".into()),
            mpd_port: 0,
            ft_port: 1,
            fd_port: 2,
            rs_port: 3,
            min_port: 4000,
            max_port: 4010,
            external_ip: Some("198.51.100.1".parse().unwrap()),
            max_processes_per_job: 8,
            max_jobs: 3,
            host_deny: vec!["192.168.".into(), "10.0.0.1".into(), "fe80::".into()],
            host_allow: vec!["10.".into()],
            t_gossip_ms: 1,
            t_max_hang_ms: 0,
            gossip_protocol: GossipProtocol::Brr,
            kmonitor: false,
            k_monitors: 3,
            t_hb_ms: 7,
            t_to_ms: 9,
            t_hb_wide_ms: Some(300),
            t_to_wide_ms: Some(3000),
            wide_refusals: 5,
            peer_cache: Some("/var/tmp/pc.json".into()),
            grid_secret: Some("the secret = # phrase".into()),
            submit_allow: vec!["alice".into(), "node-2.lab".into()],
            peer_ttl_ms: 5000,
            alive_period_ms: 1001,
            refresh_period_ms: 1002,
            ping_period_ms: 2000,
            reserve_timeout_ms: 1500,
            reservation_hold_ms: 7,
            staging_fanout: 2,
            supernode_port: 0,
            ft_cache_max: 3 << 20,
            ft_fetch_max: 12345,
            ft_job_max: 54321,
            checkpoint_max: 7 << 20,
            log_level: Some("warn,p2pmpi_peer::mpd=debug".into()),
            job_read_paths: vec!["/opt/python".into(), "/srv/data".into()],
            job_hidden_etc: vec!["shadow".into()],
            job_memory_mb: 512,
            job_cpu_seconds: 60,
            job_file_mb: 100,
            job_processes: 64,
            allow_unconfined_jobs: true,
            job_landlock_abi: Some(3),
            job_uids: Some((5000, 5999)),
            job_connect_ports: vec![(7000, 7010), (8080, 8080)],
            source: None,
        }
    }

    #[test]
    fn confinement_keys() {
        let c = Config::default();
        assert!(!c.allow_unconfined_jobs && c.job_landlock_abi.is_none() && c.job_read_paths.is_empty());
        assert_eq!((c.job_memory_mb, c.job_cpu_seconds, c.job_file_mb, c.job_processes), (0, 0, 0, 0));
        assert!(c.job_hidden_etc.iter().any(|e| e == "shadow"));
        let c = parse_ok("ALLOW_UNCONFINED_JOBS=YES\nJOB_READ_PATHS=/a, /b/c\nJOB_HIDDEN_ETC=\nJOB_LANDLOCK_ABI=0\n");
        assert!(c.allow_unconfined_jobs && c.job_hidden_etc.is_empty());
        assert_eq!(c.job_read_paths, [PathBuf::from("/a"), PathBuf::from("/b/c")]);
        assert_eq!(c.job_landlock_abi, Some(0));
        assert_eq!(parse_ok("JOB_CONNECT_PORTS=any").job_connect_ports, [(1, 65535)]);
        for bad in [
            "ALLOW_UNCONFINED_JOBS=maybe",
            "JOB_READ_PATHS=relative/path",
            "JOB_HIDDEN_ETC=ssh/keys",
            "JOB_HIDDEN_ETC=..",
            "JOB_MEMORY_MB=-1",
            "JOB_PROCESSES=many",
            "JOB_LANDLOCK_ABI=65",
            "JOB_UIDS=0-10",
            "JOB_UIDS=10-5",
            "JOB_UIDS=10",
            "JOB_CONNECT_PORTS=0",
            "JOB_CONNECT_PORTS=9-8",
            "JOB_CONNECT_PORTS=70000",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_defaults() {
        let c = Config::default();
        assert_eq!(c.supernodes, ["127.0.0.1:9700"]);
        assert_eq!(
            (c.mpd_port, c.ft_port, c.fd_port, c.rs_port, c.min_port, c.max_port),
            (9897, 9898, 9899, 9900, 9801, 9900)
        );
        assert_eq!((c.max_processes_per_job, c.max_jobs, c.staging_fanout), (1, 0, 8));
        assert_eq!((c.t_gossip_ms, c.t_max_hang_ms, c.gossip_protocol), (500, 5000, GossipProtocol::Dbrr));
        assert_eq!((c.kmonitor, c.k_monitors, c.t_hb_ms, c.t_to_ms), (false, 4, 100, 1000));
        let periods = (c.peer_ttl_ms, c.alive_period_ms, c.refresh_period_ms, c.ping_period_ms);
        assert_eq!(periods, (60000, 10000, 30000, 10000));
        assert_eq!((c.reserve_timeout_ms, c.reservation_hold_ms, c.supernode_port), (2000, 30000, 9700));
        assert_eq!((c.ft_cache_max, c.ft_fetch_max, c.ft_job_max), (1 << 30, 4 << 30, 4 << 30));
        assert!(c.visu_proxy.is_none() && c.external_ip.is_none() && c.peer_cache.is_none() && c.grid_secret.is_none());
        assert!(c.host_deny.is_empty() && c.host_allow.is_empty() && c.source.is_none());
        assert_eq!(c.peer_cache_path(), p2pmpi_dir().join("peer-cache.json"));
        let (c, _) = parse("").unwrap();
        assert_eq!(c, Config { source: Some("P2P-MPI.conf".into()), ..Config::default() });
    }

    #[test]
    fn config_every_key_and_comments() {
        let text = "\u{feff}# comment\n\n  # indented comment\r\n SUPERNODE = tcp://a.example:1, ::1 ,10.0.0.1\r\n\
            VISU_PROXY=TCP://visu/\nMPD_PORT=0\nFT_PORT=1\nFD_PORT=2\nRS_PORT=3\nMIN_PORT=4000\nMAX_PORT=4010\n\
            EXTERNAL_IP=198.51.100.1\nMAX_PROCESSES_PER_JOB=8\nMAX_JOBS=3\nHOST_DENY=192.168. , 10.0.0.1,fe80::\n\
            HOST_ALLOW=10.\nT_GOSSIP=1\nT_MAX_HANG=0\nGOSSIP_PROTOCOL=brr\nPEER_CACHE=/var/tmp/pc.json\n\
            GRID_SECRET= the secret = # phrase \nPEER_TTL=5000\nALIVE_PERIOD=1001\nCACHE_REFRESH=1002\n\
            PING_PERIOD=2000\nRESERVE_TIMEOUT=1500\nRESERVATION_HOLD=7\nSTAGING_FANOUT=2\nSUPERNODE_PORT=0\n\
            FT_CACHE_MAX=3m\nFT_FETCH_MAX=12345\nFT_JOB_MAX=54321\nCHECKPOINT_MAX=7m\nK_MONITORS=3\nT_HB=7\nT_TO=9\n\
            T_HB_WIDE=300\nT_TO_WIDE=3000\nWIDE_REFUSALS=5\nSUBMIT_ALLOW=alice, node-2.lab\n\
            LOG_LEVEL=warn,p2pmpi_peer::mpd=debug\nJOB_READ_PATHS=/opt/python,/srv/data\nJOB_HIDDEN_ETC=shadow\n\
            JOB_MEMORY_MB=512\nJOB_CPU_SECONDS=60\nJOB_FILE_MB=100\nJOB_PROCESSES=64\nALLOW_UNCONFINED_JOBS=yes\n\
            JOB_LANDLOCK_ABI=3\nJOB_UIDS=5000-5999\nJOB_CONNECT_PORTS=7000-7010, 8080\n";
        assert_eq!(parse_ok(text), non_default());
        // The "did you mean" list knows every key of this text, which sets them all.
        for line in text.lines() {
            let key = line.trim_start_matches('\u{feff}').trim();
            if let Some((k, _)) = key.split_once('=').filter(|_| !key.starts_with('#')) {
                assert!(KEYS.contains(&k.trim()), "KEYS lacks {}", k.trim());
            }
        }
        assert_eq!(non_default().peer_cache_path(), PathBuf::from("/var/tmp/pc.json"));
        let c = parse_ok("SUPERNODE=\nVISU_PROXY=\nHOST_DENY=\nEXTERNAL_IP=\nPEER_CACHE=");
        assert_eq!(c, Config { supernodes: vec![], ..Config::default() });
    }

    #[test]
    fn config_addresses_and_host_patterns() {
        let sn = |v: &str| parse(&format!("SUPERNODE={v}")).map(|(c, _)| c.supernodes);
        assert_eq!(sn("tcp://host:1,h2 , tcp://1.2.3.4:5/").unwrap(), ["host:1", "h2:9700", "1.2.3.4:5"]);
        assert_eq!(sn("[::1]:80,tcp://[fe80::1]").unwrap(), ["[::1]:80", "[fe80::1]:9700"]);
        for bad in ["udp://h:1", "h:x", "h:70000", "h:0", ":5", "a b", "a,,b", "a,", "[::1", "[zz]:1", "h/x:1"] {
            assert_eq!(err_at(&format!("SUPERNODE={bad}")), (1, "SUPERNODE".into()), "{bad}");
        }
        assert_eq!(err_at("VISU_PROXY=v:1,w"), (1, "VISU_PROXY".into()));
        let c = parse_ok("HOST_DENY= 192.168.0. , 10., 1.2.3.4, ::1\nHOST_ALLOW=130.79.192.");
        assert_eq!(
            (c.host_deny.join(" "), c.host_allow.join(" ")),
            ("192.168.0. 10. 1.2.3.4 ::1".into(), "130.79.192.".into())
        );
        for bad in ["abc", "1.2.3", "1.2.3.4.", "1.2.3.4.5", "256.1.1.1", "1..2.3", ".", "1.2,", "fe80::g", "1.2.3.x"] {
            for key in ["HOST_DENY", "HOST_ALLOW"] {
                assert_eq!(err_at(&format!("# x\n{key}={bad}")), (2, key.into()), "{bad}");
            }
        }
        let c = parse_ok("SUBMIT_ALLOW= alice , node-2.lab");
        assert_eq!(c.submit_allow, ["alice", "node-2.lab"]);
        assert!(parse_ok("SUBMIT_ALLOW=").submit_allow.is_empty());
        for bad in ["a b", "x/y", "alice,", "ok,*"] {
            assert_eq!(err_at(&format!("SUBMIT_ALLOW={bad}")), (1, "SUBMIT_ALLOW".into()), "{bad}");
        }
    }

    #[test]
    fn config_bad_values_name_line_and_key() {
        let e = parse("# c\n\nMPD_PORT=1\n\n\n\nMAX_JOBS=-1\n").unwrap_err();
        assert_eq!(e.to_string(), "P2P-MPI.conf line 7: MAX_JOBS: \"-1\" is not a non-negative integer");
        for key in NUMERIC.split_whitespace() {
            let mut bad = vec!["-1", "abc", "", "1.5", "+3", "0x10", "99999999999999999999999"];
            bad.extend(key.ends_with("PORT").then_some("65536"));
            bad.extend(AT_LEAST_ONE.split_whitespace().any(|k| k == key).then_some("0"));
            for v in bad {
                let e = parse(&format!("# comment\n\nMAX_JOBS=1\n{key}={v}\nMPD_PORT=2\n")).unwrap_err();
                assert_eq!((e.file.as_str(), e.line, e.key.as_str()), ("P2P-MPI.conf", 4, key), "{key}={v}");
                assert!(e.message.contains(&format!("{v:?}")), "{e}");
            }
            parse(&format!("MIN_PORT=1\n{key}=5")).unwrap();
        }
        assert_eq!(err_at("\nEXTERNAL_IP=1.2.3"), (2, "EXTERNAL_IP".into()));
        assert_eq!(err_at("\nGOSSIP_PROTOCOL=gossip"), (2, "GOSSIP_PROTOCOL".into()));
        let c = parse_ok("GOSSIP_PROTOCOL=kmonitor\nK_MONITORS=3\nT_HB=50\nT_TO=400");
        assert_eq!((c.kmonitor, c.k_monitors, c.t_hb_ms, c.t_to_ms), (true, 3, 50, 400));
        assert!(!parse("GOSSIP_PROTOCOL=KMONITOR\nGOSSIP_PROTOCOL=BRR").unwrap().0.kmonitor);
        assert_eq!(err_at("\nT_TO=1"), (2, "T_TO".into()));
        assert_eq!(err_at("\n\nT_TO_WIDE=1"), (3, "T_TO_WIDE".into()));
        assert_eq!(err_at("WIDE_REFUSALS=0"), (1, "WIDE_REFUSALS".into()));
        for bad in ["0", "-1", "x", "1.5"] {
            assert_eq!(err_at(&format!("T_HB_WIDE={bad}")), (1, "T_HB_WIDE".into()));
            assert_eq!(err_at(&format!("T_TO_WIDE={bad}")), (1, "T_TO_WIDE".into()));
        }
        assert_eq!(parse_ok("T_HB_WIDE=\nT_TO_WIDE=").t_to_wide_ms, None);
        let c = parse_ok("T_HB_WIDE=250\nT_TO_WIDE=2500");
        assert_eq!((c.t_hb_wide_ms, c.t_to_wide_ms, c.wide_refusals), (Some(250), Some(2500), 3));
        assert_eq!(err_at("\n\nLOG_LEVEL=loud"), (3, "LOG_LEVEL".into()));
        assert_eq!(err_at("LOG_LEVEL=info,=debug"), (1, "LOG_LEVEL".into()));
        assert_eq!(parse_ok("LOG_LEVEL=DEBUG").log_level.as_deref(), Some("DEBUG"));
        assert_eq!(parse_ok("EXTERNAL_IP=::1").external_ip, Some(IpAddr::from(Ipv6Addr::LOCALHOST)));
        for p in [GossipProtocol::Brr, GossipProtocol::Dbrr] {
            assert_eq!(p.to_string().to_lowercase().parse::<GossipProtocol>(), Ok(p));
        }
    }

    #[test]
    fn config_warnings_and_malformed_lines() {
        let (c, w) = parse("MAX_JOBS=1\n\nFOO=bar\nMAX_JOBS=2\n").unwrap();
        assert_eq!(c.max_jobs, 2);
        assert_eq!(w[0].to_string(), "P2P-MPI.conf line 3: FOO: unknown key, ignored");
        assert_eq!((w.len(), w[1].line, w[1].key.as_str()), (2, 4, "MAX_JOBS"));
        assert!(w[1].message.contains("line 1"), "{}", w[1]);
        assert_eq!(err_at("MAX_JOBS=1\nthis is not a setting\n"), (2, "this is not a setting".into()));
        assert_eq!(err_at("\n = 3").0, 2);
        // A near miss is named.
        let (c, w) = parse("MAX_PROCESS_PER_JOB=4\nmax_jobs=3\nSUPERNOD=a:1\nZZZ=1\n").unwrap();
        assert_eq!((c.max_processes_per_job, c.max_jobs), (1, 0));
        let shown: Vec<String> = w.iter().map(|w| w.message.clone()).collect();
        assert_eq!(
            shown,
            [
                "unknown key, ignored (did you mean MAX_PROCESSES_PER_JOB?)",
                "unknown key, ignored (did you mean MAX_JOBS?)",
                "unknown key, ignored (did you mean SUPERNODE?)",
                "unknown key, ignored",
            ]
        );
        // Every listed key is one `apply` knows.
        for k in KEYS {
            assert_ne!(apply(&mut Config::default(), k, "x"), Ok(false), "{k}");
        }
        assert_eq!(err_at("MAX_PORT=100\nMIN_PORT=200\n"), (1, "MAX_PORT".into()));
        assert_eq!(err_at("\nMIN_PORT=9950\n"), (2, "MIN_PORT".into()));
        assert_eq!(parse_ok("MIN_PORT=10\nMAX_PORT=10").min_port, 10);
    }

    #[test]
    fn config_sizes() {
        let sizes = |v: &str| {
            parse(&format!("FT_CACHE_MAX={v}\nFT_FETCH_MAX={v}")).map(|(c, _)| (c.ft_cache_max, c.ft_fetch_max))
        };
        for (v, n) in [("1", 1), ("1073741824", 1 << 30), ("512K", 512 << 10), ("64m", 64 << 20), ("1G", 1 << 30)] {
            assert_eq!(sizes(v), Ok((n, n)), "{v}");
        }
        for (v, n) in [("4GiB", 4u64 << 30), ("2tib", 2 << 40), ("3MiB", 3 << 20), ("16383T", 16383 << 40)] {
            assert_eq!(sizes(v), Ok((n, n)), "{v}");
        }
        assert_eq!(parse_ok("FT_CACHE_MAX=0").ft_cache_max, 0, "a cache that keeps nothing");
        assert_eq!(err_at("\nFT_FETCH_MAX=0"), (2, "FT_FETCH_MAX".into()));
        assert_eq!(err_at("\n\nFT_JOB_MAX=0"), (3, "FT_JOB_MAX".into()));
        assert_eq!(parse_ok("FT_JOB_MAX=2G").ft_job_max, 2 << 30);
        assert_eq!(err_at("\nCHECKPOINT_MAX=0"), (2, "CHECKPOINT_MAX".into()));
        assert_eq!(err_at("CHECKPOINT_MAX=lots"), (1, "CHECKPOINT_MAX".into()));
        assert_eq!(parse_ok("CHECKPOINT_MAX=64M").checkpoint_max, 64 << 20);
        for key in SIZES.split_whitespace() {
            for bad in ["", "-1", "1.5G", "G", "1 G", "1GB", "1P", "0x10", "+3", "16777216T", "99999999999999999999"] {
                let e = parse(&format!("# c\n{key}={bad}\n")).unwrap_err();
                assert_eq!((e.line, e.key.as_str()), (2, key), "{key}={bad}");
                assert!(e.message.contains(&format!("{bad:?}")), "{e}");
            }
        }
        let e = parse("FT_CACHE_MAX=1GB").unwrap_err().to_string();
        assert_eq!(
            e,
            "P2P-MPI.conf line 1: FT_CACHE_MAX: \"1GB\" is not a size (bytes, or a number followed by K, M, G or T, such as 512M or 4G)"
        );
        for (n, text) in
            [(0, "0"), (1, "1"), (1000, "1000"), (1024, "1K"), (1536, "1536"), (5 << 30, "5G"), (1 << 40, "1T")]
        {
            assert_eq!(size_text(n), text);
        }
    }

    /// Issue 13: a key given twice is not silently accepted.
    #[test]
    fn config_a_key_given_twice_is_warned_naming_both_lines() {
        let (c, w) = parse("MAX_JOBS=1\n# c\nFT_CACHE_MAX=1G\nMAX_JOBS=2\n\nFT_CACHE_MAX=2G\n").unwrap();
        assert_eq!((c.max_jobs, c.ft_cache_max), (2, 2 << 30), "the last value wins");
        let w: Vec<String> = w.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            w,
            [
                "P2P-MPI.conf line 4: MAX_JOBS: given again (first on line 1); the last value wins",
                "P2P-MPI.conf line 6: FT_CACHE_MAX: given again (first on line 3); the last value wins",
            ]
        );
    }

    #[test]
    fn config_round_trip() {
        for c in [Config::default(), non_default(), Config { supernodes: vec![], ..Config::default() }] {
            assert_eq!(parse_ok(&c.to_text()), c);
        }
        let text = Config::default().to_text();
        for section in ["Bootstrap", "Local machine", "Resource contribution", "Fault detector", "Beyond the seeds"] {
            assert!(text.contains(section), "{section}");
        }
        assert!(!text.lines().any(|l| l.starts_with("GRID_SECRET")));
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("p2pmpi-config-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn config_load_file() {
        let missing = temp_path("missing.conf");
        let e = Config::load_file(&missing).unwrap_err();
        assert_eq!((e.file, e.line), (missing.display().to_string(), 0));
        let path = temp_path("good.conf");
        std::fs::write(&path, "MAX_JOBS=4\n").unwrap();
        let (c, _) = Config::load_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((c.max_jobs, c.source), (4, Some(path)));
    }

    /// The only test touching the environment (P2PMPI_CONF_FILE).
    #[test]
    fn config_load_from_env() {
        let before = std::env::var_os("P2PMPI_CONF_FILE");
        let (path, missing) = (temp_path("env.conf"), temp_path("env-missing.conf"));
        std::fs::write(&path, "STAGING_FANOUT=3\n").unwrap();
        std::env::set_var("P2PMPI_CONF_FILE", &path);
        let good = Config::load();
        std::env::set_var("P2PMPI_CONF_FILE", &missing);
        let bad = Config::load();
        match before {
            Some(v) => std::env::set_var("P2PMPI_CONF_FILE", v),
            None => std::env::remove_var("P2PMPI_CONF_FILE"),
        }
        std::fs::remove_file(&path).unwrap();
        let (c, _) = good.unwrap();
        assert_eq!((c.staging_fanout, c.source), (3, Some(path)));
        let e = bad.unwrap_err();
        assert_eq!((e.file, e.line, e.key.as_str()), (missing.display().to_string(), 0, "P2PMPI_CONF_FILE"));
    }

    proptest! {
        #[test]
        fn config_parse_never_panics(text in "(?s).{0,400}") {
            let _ = parse(&text);
        }

        #[test]
        fn config_parse_any_value_never_panics(
            key in prop::sample::select(
                NUMERIC.split_whitespace().chain(OTHER.split_whitespace()).chain(SIZES.split_whitespace()).collect::<Vec<_>>()
            ),
            value in "[^\n]{0,40}",
            ascii in "[0-9a-zA-Z.:,/\\[\\] _#=-]{0,30}",
        ) {
            for v in [&value, &ascii] {
                if let Err(e) = parse(&format!("# x\n{key}={v}\n")) {
                    prop_assert_eq!(e.line, 2);
                    prop_assert!(e.key == key || e.key == "MAX_PORT" || e.key == "MIN_PORT");
                }
            }
        }

        #[test]
        fn config_round_trip_numbers(ports in prop::array::uniform7(any::<u16>()), nums in prop::array::uniform11(1u32..)) {
            let mut c = non_default();
            (c.min_port, c.max_port) = (ports[5].min(ports[6]), ports[5].max(ports[6]));
            for (f, p) in [&mut c.mpd_port, &mut c.ft_port, &mut c.fd_port, &mut c.rs_port, &mut c.supernode_port].into_iter().zip(ports) {
                *f = p;
            }
            let ms = [&mut c.t_gossip_ms, &mut c.t_max_hang_ms, &mut c.peer_ttl_ms, &mut c.alive_period_ms,
                &mut c.refresh_period_ms, &mut c.ping_period_ms, &mut c.reserve_timeout_ms, &mut c.reservation_hold_ms];
            for (f, n) in ms.into_iter().zip(nums) {
                *f = u64::from(n) * 1_000_003;
            }
            (c.max_processes_per_job, c.max_jobs, c.staging_fanout) = (nums[8], nums[9], nums[10]);
            prop_assert_eq!(parse_ok(&c.to_text()), c);
        }

        #[test]
        fn config_round_trip_sizes(cache in any::<u64>(), fetch in 1u64.., units in 1u64..1 << 20, shift in 0u32..41) {
            let mut c = non_default();
            (c.ft_cache_max, c.ft_fetch_max) = (cache, fetch);
            prop_assert_eq!(parse_ok(&c.to_text()), c.clone());
            (c.ft_cache_max, c.ft_fetch_max) = (units << shift, units << shift);
            prop_assert_eq!(parse_ok(&c.to_text()), c);
        }
    }
}
