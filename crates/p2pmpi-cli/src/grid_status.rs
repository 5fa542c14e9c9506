//! `p2pmpi grid status [--json] [--watch]`: the whole grid in one view — every peer the
//! supernodes know (address, OS, CPUs, load, memory, jobs against `MAX_JOBS`, processes per
//! job), whether it answers, and the MPI jobs running on it (program, ranks and replicas,
//! which replica is each rank's master).
//!
//! The supernodes (`SUPERNODE` of this host's configuration) give the peers; each peer's MPD
//! is asked for its `Report` over the grid's authenticated channel (in parallel, 2 s each).
//! Nothing is changed anywhere.

use crate::commands::supernode_addrs;
use crate::grid_run::{load_config, secret_of};
use anyhow::{bail, Result};
use p2pmpi_peer::{mpd, supernode};
use p2pmpi_wire::grid::{AppProcess, HostReport, MpdRequest, MpdResponse, PeerInfo, SnRequest, SnResponse};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// One peer as the view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PeerView {
    pub address: String,
    pub name: String,
    /// `up` (its MPD answered) or `unreachable` (with why).
    pub status: String,
    pub error: Option<String>,
    /// Milliseconds since the supernode last heard from it.
    pub last_seen_ms: u64,
    pub os: Option<String>,
    pub cpus: Option<u32>,
    pub load1: Option<f32>,
    pub mem_total_kb: Option<u64>,
    pub mem_available_kb: Option<u64>,
    /// Jobs running there, and its `MAX_JOBS` (0: unlimited) and `MAX_PROCESSES_PER_JOB`.
    pub jobs: Option<u32>,
    pub max_jobs: Option<u32>,
    pub max_procs: u32,
}

/// One process of a job.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessView {
    pub rank: u32,
    pub replica: u32,
    /// The lowest replica of its rank still running: the one whose output is shown.
    pub master: bool,
    pub host: String,
    pub pid: u32,
}

/// One job.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub job: String,
    pub program: String,
    pub replicas: u32,
    /// Where its rank 0 (the submitter) listens.
    pub root: String,
    pub processes: Vec<ProcessView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridView {
    pub supernodes: Vec<String>,
    pub peers: Vec<PeerView>,
    pub jobs: Vec<JobView>,
}

/// Asks the supernodes and every peer; the view of the grid now.
pub fn gather() -> Result<GridView> {
    let cfg = load_config("p2pmpi grid status")?;
    let secret = secret_of(&cfg)?;
    let mut hosts: BTreeMap<String, (PeerInfo, u64)> = BTreeMap::new();
    let mut answered = Vec::new();
    let mut errors = Vec::new();
    for (name, addr) in supernode_addrs(&cfg) {
        let Some(addr) = addr else {
            errors.push(format!("supernode {name}: address does not resolve"));
            continue;
        };
        match supernode::call(None, addr, &secret, &SnRequest::List, Duration::from_secs(3)) {
            Ok(SnResponse::Hosts(list)) => {
                answered.push(addr.to_string());
                for h in list {
                    let key = format!("{}:{}", h.info.id.ip, h.info.id.mpd_port);
                    let fresher = hosts.get(&key).is_none_or(|(_, seen)| h.last_seen_ms < *seen);
                    if fresher {
                        hosts.insert(key, (h.info, h.last_seen_ms));
                    }
                }
            }
            Ok(other) => errors.push(format!("supernode {name}: unexpected answer {other:?}")),
            Err(e) => errors.push(format!("supernode {name}: {e:#}")),
        }
    }
    if answered.is_empty() {
        bail!("no supernode answered ({})", errors.join("; "));
    }
    // Every MPD at once, each within its own time-out.
    let reports: Vec<(String, PeerInfo, u64, Result<HostReport>)> = std::thread::scope(|s| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|(key, (info, seen))| {
                let secret = &secret;
                s.spawn(move || {
                    let r = (|| -> Result<HostReport> {
                        let addr: SocketAddr = key.parse()?;
                        match mpd::call(None, addr, secret, &MpdRequest::Report)? {
                            MpdResponse::Report(r) => Ok(r),
                            MpdResponse::Failed(why) => bail!("{why}"),
                            other => bail!("unexpected answer {other:?}"),
                        }
                    })();
                    (key.clone(), info.clone(), *seen, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("report thread")).collect()
    });
    let mut peers = Vec::new();
    let mut procs: BTreeMap<String, (AppProcess, Vec<ProcessView>)> = BTreeMap::new();
    for (key, info, seen, r) in reports {
        let ip = info.id.ip.clone();
        match r {
            Ok(rep) => {
                for a in &rep.apps {
                    let r = a.replicas.max(1);
                    let e = procs.entry(a.job.clone()).or_insert_with(|| (a.clone(), Vec::new()));
                    e.1.push(ProcessView {
                        rank: a.rank / r,
                        replica: a.rank % r,
                        master: false,
                        host: ip.clone(),
                        pid: a.pid,
                    });
                }
                peers.push(PeerView {
                    address: key,
                    name: rep.name,
                    status: "up".into(),
                    error: None,
                    last_seen_ms: seen,
                    os: Some(rep.os),
                    cpus: Some(rep.cpus),
                    load1: Some(rep.load1),
                    mem_total_kb: Some(rep.mem_total_kb),
                    mem_available_kb: Some(rep.mem_available_kb),
                    jobs: Some(rep.jobs),
                    max_jobs: Some(rep.max_jobs),
                    max_procs: rep.max_procs,
                });
            }
            Err(e) => peers.push(PeerView {
                address: key,
                name: info.name.clone(),
                status: "unreachable".into(),
                error: Some(format!("{e:#}")),
                last_seen_ms: seen,
                os: None,
                cpus: None,
                load1: None,
                mem_total_kb: None,
                mem_available_kb: None,
                jobs: None,
                max_jobs: None,
                max_procs: info.capacity,
            }),
        }
    }
    let jobs = procs
        .into_values()
        .map(|(a, mut ps)| {
            ps.sort_by_key(|p| (p.rank, p.replica));
            let mut seen_rank = None;
            for p in ps.iter_mut() {
                p.master = seen_rank != Some(p.rank);
                seen_rank = Some(p.rank);
            }
            JobView { job: a.job, program: a.app, replicas: a.replicas.max(1), root: a.root, processes: ps }
        })
        .collect();
    Ok(GridView { supernodes: answered, peers, jobs })
}

/// The view as text for a terminal.
pub fn render(v: &GridView) -> String {
    let mut s = String::new();
    let up = v.peers.iter().filter(|p| p.status == "up").count();
    s.push_str(&format!(
        "Grid: {} peer(s) known to supernode(s) {}, {up} answering; {} job(s) running\n\n",
        v.peers.len(),
        v.supernodes.join(", "),
        v.jobs.len()
    ));
    s.push_str(&format!(
        "{:<22} {:<14} {:<12} {:<22} {:>4} {:>6} {:>13} {:>9} {:>2}\n",
        "Peer", "Name", "Status", "OS", "CPUs", "Load", "Memory free", "Jobs/J", "P"
    ));
    for p in &v.peers {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "-".into());
        let mem = match (p.mem_available_kb, p.mem_total_kb) {
            (Some(a), Some(t)) if t > 0 => format!("{:.1}/{:.1} G", a as f64 / 1048576.0, t as f64 / 1048576.0),
            _ => "-".into(),
        };
        let jobs = match (p.jobs, p.max_jobs) {
            (Some(j), Some(0)) => format!("{j}/∞"),
            (Some(j), Some(m)) => format!("{j}/{m}"),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "{:<22} {:<14} {:<12} {:<22} {:>4} {:>6} {:>13} {:>9} {:>2}\n",
            p.address,
            truncate(&p.name, 14),
            p.status,
            truncate(&opt(p.os.clone()), 22),
            opt(p.cpus.map(|c| c.to_string())),
            opt(p.load1.map(|l| format!("{l:.2}"))),
            mem,
            jobs,
            p.max_procs
        ));
        if let Some(e) = &p.error {
            s.push_str(&format!("    {e}\n"));
        }
    }
    for j in &v.jobs {
        s.push_str(&format!(
            "\nJob {} — {} ({} replica(s) per rank; rank 0 at {})\n",
            j.job, j.program, j.replicas, j.root
        ));
        for p in &j.processes {
            let who = if j.replicas > 1 {
                format!("rank {} replica {}{}", p.rank, p.replica, if p.master { " (master)" } else { "" })
            } else {
                format!("rank {}", p.rank)
            };
            s.push_str(&format!("  {who:<28} on {:<16} pid {}\n", p.host, p.pid));
        }
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).chain(std::iter::once('…')).collect()
    }
}

/// `p2pmpi grid status`.
pub fn run(json: bool, watch: bool) -> Result<()> {
    loop {
        let v = gather()?;
        if json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            if watch {
                // Clear the screen and go home.
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&v));
        }
        crate::commands::flush();
        if !watch {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}
