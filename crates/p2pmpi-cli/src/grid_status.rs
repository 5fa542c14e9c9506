//! `p2pmpi grid status [--json] [--watch]`: the whole grid in one view — every peer the
//! supernodes know (address, OS, CPUs, load, memory, jobs against `MAX_JOBS`, processes per
//! job), whether it answers, and the MPI jobs running on it (program, ranks and replicas,
//! which replica is each rank's master), and the recent events of the jobs (failures as the
//! launchers' supervisors declared them, takeovers of a rank by another replica).
//!
//! The supernodes (`SUPERNODE` of this host's configuration) give the peers; each peer's MPD
//! is asked for its `Report` over the grid's authenticated channel (in parallel, 2 s each).
//! Nothing is changed anywhere. `p2pmpi monitor` (the monitor module) shows the same view
//! on a web page.

use crate::commands::supernode_addrs;
use crate::grid_run::{load_config, secret_of};
use anyhow::{bail, Result};
use p2pmpi_peer::config::Config;
use p2pmpi_peer::supernode;
use p2pmpi_wire::grid::{
    AppProcess, HostReport, JobHistory, JobNoticeKind, MpdRequest, MpdResponse, PeerInfo, SnRequest, SnResponse,
};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Ended jobs shown (the most recent), with their failures.
pub const ENDED_JOBS_SHOWN: usize = 8;

/// How long a peer has to answer (connection, handshake and report).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// One peer as the view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PeerView {
    pub address: String,
    pub name: String,
    /// What a graph labels it with: its name, or its address when other peers have the same
    /// name (peers of one machine, a local grid).
    pub label: String,
    /// The DNS domain of its name (`example.org` of `node1.example.org`), if it has one.
    pub domain: Option<String>,
    /// Its subnet (`192.0.2.0/24`; `/64` for IPv6).
    pub subnet: String,
    /// What the graph groups it by: its domain, else its subnet.
    pub group: String,
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
    /// Round trip of the `Report` request (after the handshake), in milliseconds.
    pub rtt_ms: Option<f64>,
}

/// One process of a job.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessView {
    pub rank: u32,
    pub replica: u32,
    /// The lowest replica of its rank still running: the one whose output is shown.
    pub master: bool,
    pub host: String,
    /// 0 when it no longer runs.
    pub pid: u32,
    /// `running`, `failed` (declared dead by the job's supervisor) or `ended`.
    pub status: String,
    /// Why it failed, as its launcher reported it.
    pub failure: Option<String>,
}

/// One event of a job, as its launcher reported it.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `placed`, `failed`, `takeover`, `fenced` or `ended`.
    pub kind: String,
    pub rank: u32,
    pub replica: u32,
    pub host: String,
    pub detail: String,
}

/// One job.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub job: String,
    pub program: String,
    pub replicas: u32,
    /// Where its rank 0 (the submitter) listens.
    pub root: String,
    /// `running`, or `ended` (a recent job whose events are still kept).
    pub state: String,
    /// The peer whose MPD keeps its events (its submitter's), if it reported any.
    pub submitter: Option<String>,
    pub processes: Vec<ProcessView>,
    /// Replicas declared dead, and ranks taken over by another replica.
    pub failures: u32,
    pub takeovers: u32,
    /// Its recent events, oldest first (without the placements).
    pub events: Vec<EventView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GridView {
    pub supernodes: Vec<String>,
    pub peers: Vec<PeerView>,
    pub jobs: Vec<JobView>,
    /// Member mode: the members the grid's owner revoked (their peers show `revoked`).
    pub revoked: Vec<String>,
}

/// Member mode: the revoked members (only entries the owner signed) and their hosts'
/// addresses, as the supernodes hold them.
fn revoked_of(cfg: &Config, secret: &GridSecret, within: Duration) -> (Vec<String>, Vec<String>) {
    let Some(owner) = secret.member_info().map(|m| m.owner) else { return (vec![], vec![]) };
    let mut list = p2pmpi_wire::identity::RevocationList::new(owner);
    let addrs: Vec<SocketAddr> = supernode_addrs(cfg).into_iter().filter_map(|(_, a)| a).collect();
    let (entries, hosts) = supernode::revoked_from(None, &addrs, secret, within);
    list.merge(entries);
    let hosts = hosts.into_iter().map(|id| format!("{}:{}", id.ip, id.mpd_port)).collect();
    // The monitor's own connections refuse revoked members from now on too.
    let r = list.revocations();
    p2pmpi_peer::members::add_revoked(secret, &r);
    (r.names.into_iter().collect(), hosts)
}

/// Asks the supernodes and every peer; the view of the grid now.
pub fn gather() -> Result<GridView> {
    let cfg = load_config("p2pmpi grid status")?;
    let secret = secret_of(&cfg)?;
    gather_with(&cfg, &secret, ANSWER_WITHIN)
}

/// One peer's report and its round trip (the request's, after the handshake).
fn report_of(addr: SocketAddr, secret: &GridSecret, within: Duration) -> Result<(HostReport, Duration)> {
    let mut c = SecureConn::connect_from(None, addr, secret, within)
        .map_err(|e| anyhow::anyhow!("cannot reach the MPD at {addr}: {e}"))?;
    c.set_read_timeout(Some(within))?;
    c.set_max_record(16 << 20);
    let t = Instant::now();
    match c.call(&MpdRequest::Report) {
        Ok(MpdResponse::Report(r)) => Ok((r, t.elapsed())),
        Ok(MpdResponse::Failed(why)) => bail!("{why}"),
        Ok(other) => bail!("unexpected answer {other:?}"),
        Err(e) => bail!("the MPD at {addr} did not answer within {} s: {e}", within.as_secs_f32()),
    }
}

/// The subnet of an address: /24 for IPv4, /64 for IPv6.
pub fn subnet_of(ip: &str) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(v)) => {
            let o = v.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        Ok(IpAddr::V6(v)) => {
            let s = v.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Err(_) => ip.to_string(),
    }
}

/// The DNS domain of a host name: what follows its first dot (none for a bare name or an
/// address).
pub fn domain_of(name: &str) -> Option<String> {
    if name.parse::<IpAddr>().is_ok() {
        return None;
    }
    name.split_once('.').map(|(_, d)| d.to_string()).filter(|d| !d.is_empty())
}

/// Asks the supernodes of `cfg` and every peer they know (each within `within`).
pub fn gather_with(cfg: &Config, secret: &GridSecret, within: Duration) -> Result<GridView> {
    let mut hosts: BTreeMap<String, (PeerInfo, u64)> = BTreeMap::new();
    let mut answered = Vec::new();
    let mut errors = Vec::new();
    for (name, addr) in supernode_addrs(cfg) {
        let Some(addr) = addr else {
            errors.push(format!("supernode {name}: address does not resolve"));
            continue;
        };
        match supernode::call(None, addr, secret, &SnRequest::List, within + Duration::from_secs(1)) {
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
            Err(e) => errors.push(format!("supernode {name}: {}", crate::error_text(&e))),
        }
    }
    if answered.is_empty() {
        bail!("no supernode answered ({})", errors.join("; "));
    }
    // Every MPD at once, each within its own time-out.
    type Answer = (String, PeerInfo, u64, Result<(HostReport, Duration)>);
    let reports: Vec<Answer> = std::thread::scope(|s| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|(key, (info, seen))| {
                s.spawn(move || {
                    let r = key
                        .parse::<SocketAddr>()
                        .map_err(anyhow::Error::from)
                        .and_then(|addr| report_of(addr, secret, within));
                    (key.clone(), info.clone(), *seen, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("report thread")).collect()
    });
    let mut peers = Vec::new();
    let mut procs: BTreeMap<String, (AppProcess, Vec<ProcessView>)> = BTreeMap::new();
    let mut histories: Vec<(String, JobHistory)> = Vec::new();
    for (key, info, seen, r) in reports {
        let ip = info.id.ip.clone();
        let subnet = subnet_of(&ip);
        let (name, domain) = match &r {
            Ok((rep, _)) => (rep.name.clone(), domain_of(&rep.name)),
            Err(_) => (info.name.clone(), domain_of(&info.name)),
        };
        let group = domain.clone().unwrap_or_else(|| subnet.clone());
        match r {
            Ok((rep, rtt)) => {
                for a in &rep.apps {
                    let r = a.replicas.max(1);
                    let e = procs.entry(a.job.clone()).or_insert_with(|| (a.clone(), Vec::new()));
                    e.1.push(ProcessView {
                        rank: a.rank / r,
                        replica: a.rank % r,
                        master: false,
                        host: ip.clone(),
                        pid: a.pid,
                        status: "running".into(),
                        failure: None,
                    });
                }
                histories.extend(rep.history.into_iter().map(|h| (key.clone(), h)));
                peers.push(PeerView {
                    address: key,
                    label: name.clone(),
                    name,
                    domain,
                    subnet,
                    group,
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
                    rtt_ms: Some(rtt.as_secs_f64() * 1000.0),
                });
            }
            Err(e) => peers.push(PeerView {
                address: key,
                label: name.clone(),
                name,
                domain,
                subnet,
                group,
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
                rtt_ms: None,
            }),
        }
    }
    let mut jobs: Vec<JobView> = procs
        .into_values()
        .map(|(a, ps)| JobView {
            job: a.job,
            program: a.app,
            replicas: a.replicas.max(1),
            root: a.root,
            state: "running".into(),
            submitter: None,
            processes: ps,
            failures: 0,
            takeovers: 0,
            events: Vec::new(),
        })
        .collect();
    for (peer, h) in histories {
        merge_history(&mut jobs, &peer, h);
    }
    for j in jobs.iter_mut() {
        j.processes.sort_by_key(|p| (p.rank, p.replica));
        let mut seen_rank = None;
        for p in j.processes.iter_mut() {
            p.master = p.status == "running" && seen_rank != Some(p.rank);
            if p.master {
                seen_rank = Some(p.rank);
            }
        }
    }
    // Running jobs first, then the most recent; of the ended ones, the last few only.
    jobs.sort_by_key(|j| (j.state != "running", std::cmp::Reverse(j.events.first().map_or(u64::MAX, |e| e.at_ms))));
    let running = jobs.iter().filter(|j| j.state == "running").count();
    jobs.truncate(running + ENDED_JOBS_SHOWN);
    label_and_count(&mut peers, &jobs);
    let (revoked, revoked_hosts) = revoked_of(cfg, secret, within + Duration::from_secs(1));
    for p in peers.iter_mut().filter(|p| revoked_hosts.contains(&p.address)) {
        p.status = "revoked".into();
    }
    Ok(GridView { supernodes: answered, peers, jobs, revoked })
}

/// Labels peers whose names repeat by their address, and counts on each peer at least the
/// running jobs with a process there (the submitter runs rank 0 outside its MPD's bookings).
pub fn label_and_count(peers: &mut [PeerView], jobs: &[JobView]) {
    let names: Vec<String> = peers.iter().map(|p| p.name.clone()).collect();
    for p in peers.iter_mut() {
        let repeated = names.iter().filter(|n| **n == p.name).count() > 1;
        p.label = if repeated || p.name.is_empty() { p.address.clone() } else { p.name.clone() };
        let ip = p.address.rsplit_once(':').map_or(p.address.as_str(), |(ip, _)| ip);
        let here = jobs
            .iter()
            .filter(|j| j.state == "running" && j.processes.iter().any(|x| x.status == "running" && x.host == ip))
            .count() as u32;
        if let Some(n) = p.jobs.as_mut() {
            *n = (*n).max(here);
        }
    }
}

/// Adds a job's events (kept by its submitter's MPD, `peer`) to the jobs seen running: its
/// failed processes, takeovers, and the job itself if it no longer runs.
fn merge_history(jobs: &mut Vec<JobView>, peer: &str, h: JobHistory) {
    let i = match jobs.iter().position(|j| j.job == h.job) {
        Some(i) => i,
        None => {
            jobs.push(JobView {
                job: h.job.clone(),
                program: h.app.clone(),
                replicas: 1 + h.notices.iter().map(|n| n.replica).max().unwrap_or(0),
                root: String::new(),
                state: "ended".into(),
                submitter: None,
                processes: Vec::new(),
                failures: 0,
                takeovers: 0,
                events: Vec::new(),
            });
            jobs.len() - 1
        }
    };
    let j = &mut jobs[i];
    j.submitter = Some(peer.to_string());
    let running: BTreeSet<(u32, u32)> = j.processes.iter().map(|p| (p.rank, p.replica)).collect();
    let mut placed: BTreeMap<(u32, u32), String> = BTreeMap::new();
    let mut failed: BTreeMap<(u32, u32), String> = BTreeMap::new();
    for n in h.notices {
        let kind = match n.kind {
            JobNoticeKind::Placed => {
                placed.insert((n.rank, n.replica), n.host);
                continue;
            }
            JobNoticeKind::Failed => {
                j.failures += 1;
                failed.insert((n.rank, n.replica), n.detail.clone());
                // (Its placement may have been dropped from a long history.)
                placed.entry((n.rank, n.replica)).or_insert_with(|| n.host.clone());
                "failed"
            }
            JobNoticeKind::Takeover => {
                j.takeovers += 1;
                "takeover"
            }
            JobNoticeKind::Fenced => "fenced",
            JobNoticeKind::Ended => {
                if j.state == "running" && running.is_empty() {
                    j.state = "ended".into();
                }
                "ended"
            }
        };
        j.events.push(EventView {
            at_ms: n.at_ms,
            kind: kind.into(),
            rank: n.rank,
            replica: n.replica,
            host: n.host,
            detail: n.detail,
        });
    }
    // The processes no longer running: failed ones, or ended ones.
    for ((rank, replica), host) in placed {
        if running.contains(&(rank, replica)) {
            if let Some(p) = j.processes.iter_mut().find(|p| (p.rank, p.replica) == (rank, replica)) {
                // A failed replica still running (declared dead, not stopped yet).
                if let Some(why) = failed.get(&(rank, replica)) {
                    p.status = "failed".into();
                    p.failure = Some(why.clone());
                }
            }
            continue;
        }
        let failure = failed.get(&(rank, replica)).cloned();
        j.processes.push(ProcessView {
            rank,
            replica,
            master: false,
            host,
            pid: 0,
            status: if failure.is_some() { "failed" } else { "ended" }.into(),
            failure,
        });
    }
}

/// How long the monitor keeps showing a peer the supernodes no longer list.
pub const DOWN_PEER_KEPT_MS: u64 = 3_600_000;

/// Failed jobs the monitor keeps showing once their submitter's MPD forgot them.
pub const FAILED_JOBS_KEPT: usize = 32;

/// What the monitor remembers between its polls (pure: the time is passed in): the peers it
/// saw, to show one whose daemon died as `unreachable` instead of letting it vanish, and the
/// jobs that failed, kept after their submitter's MPD dropped them.
#[derive(Debug, Default)]
pub struct Memory {
    /// Address → the peer as last seen answering, and when (ms).
    peers: BTreeMap<String, (PeerView, u64)>,
    /// Failed jobs, oldest first.
    failed: Vec<JobView>,
}

/// Whether a job failed: a process declared dead, or an end with a non-zero status.
fn job_failed(j: &JobView) -> bool {
    j.failures > 0 || j.events.iter().any(|e| e.kind == "ended" && e.detail != "ended")
}

impl Memory {
    /// The view to show: `view`, plus the peers seen before and missing now (as
    /// `unreachable`), plus the failed jobs it no longer has.
    pub fn keep(&mut self, mut view: GridView, now_ms: u64) -> GridView {
        for p in view.peers.iter().filter(|p| p.status == "up") {
            self.peers.insert(p.address.clone(), (p.clone(), now_ms));
        }
        self.peers.retain(|_, (_, at)| now_ms.saturating_sub(*at) < DOWN_PEER_KEPT_MS);
        for (addr, (last, at)) in &self.peers {
            if view.peers.iter().any(|p| &p.address == addr) {
                continue;
            }
            let mut down = last.clone();
            down.status = "unreachable".into();
            down.error = Some("no supernode lists it any more: its daemon stopped or was killed".into());
            down.last_seen_ms = now_ms.saturating_sub(*at);
            (down.jobs, down.load1, down.mem_available_kb, down.rtt_ms) = (None, None, None, None);
            view.peers.push(down);
        }
        for j in view.jobs.iter().filter(|j| j.state != "running" && job_failed(j)) {
            self.failed.retain(|k| k.job != j.job);
            self.failed.push(j.clone());
        }
        let excess = self.failed.len().saturating_sub(FAILED_JOBS_KEPT);
        self.failed.drain(..excess);
        for j in self.failed.iter().rev() {
            if !view.jobs.iter().any(|k| k.job == j.job) {
                view.jobs.push(j.clone());
            }
        }
        label_and_count(&mut view.peers, &view.jobs);
        view
    }
}

/// The view as text for a terminal.
pub fn render(v: &GridView) -> String {
    let mut s = String::new();
    let up = v.peers.iter().filter(|p| p.status == "up").count();
    s.push_str(&format!(
        "Grid: {} peer(s) known to supernode(s) {}, {up} answering; {} job(s) running\n\n",
        v.peers.len(),
        v.supernodes.join(", "),
        v.jobs.iter().filter(|j| j.state == "running").count()
    ));
    if !v.revoked.is_empty() {
        s.push_str(&format!("Revoked members: {}\n\n", v.revoked.join(", ")));
    }
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
        let state = if j.state == "running" { String::new() } else { format!(", {}", j.state) };
        let root = if j.root.is_empty() { String::new() } else { format!("; rank 0 at {}", j.root) };
        s.push_str(&format!("\nJob {} — {} ({} replica(s) per rank{root}{state})\n", j.job, j.program, j.replicas));
        for p in &j.processes {
            let who = if j.replicas > 1 {
                format!("rank {} replica {}{}", p.rank, p.replica, if p.master { " (master)" } else { "" })
            } else {
                format!("rank {}", p.rank)
            };
            let what = match p.status.as_str() {
                "running" => format!("pid {}", p.pid),
                "failed" => format!("FAILED: {}", p.failure.as_deref().unwrap_or("declared dead")),
                other => other.to_string(),
            };
            s.push_str(&format!("  {who:<28} on {:<16} {what}\n", p.host));
        }
        if j.failures + j.takeovers > 0 {
            s.push_str(&format!("  {} failure(s), {} takeover(s):\n", j.failures, j.takeovers));
            for e in j.events.iter().filter(|e| e.kind == "failed" || e.kind == "takeover" || e.kind == "fenced") {
                s.push_str(&format!("    {} {}\n", e.kind, e.detail));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str, name: &str, jobs: u32) -> PeerView {
        PeerView {
            address: address.into(),
            name: name.into(),
            label: String::new(),
            domain: None,
            subnet: subnet_of(address.rsplit_once(':').unwrap().0),
            group: String::new(),
            status: "up".into(),
            error: None,
            last_seen_ms: 0,
            os: Some("Linux".into()),
            cpus: Some(2),
            load1: Some(0.5),
            mem_total_kb: None,
            mem_available_kb: None,
            jobs: Some(jobs),
            max_jobs: Some(0),
            max_procs: 1,
            rtt_ms: Some(0.1),
        }
    }

    fn job(id: &str, state: &str, host: &str, failures: u32) -> JobView {
        JobView {
            job: id.into(),
            program: "prog".into(),
            replicas: 1,
            root: String::new(),
            state: state.into(),
            submitter: None,
            processes: vec![ProcessView {
                rank: 0,
                replica: 0,
                master: true,
                host: host.into(),
                pid: 1,
                status: if state == "running" { "running" } else { "ended" }.into(),
                failure: None,
            }],
            failures,
            takeovers: 0,
            events: Vec::new(),
        }
    }

    #[test]
    fn repeated_names_are_labelled_by_address_and_rank_0_counts_as_a_job() {
        let mut peers = vec![peer("127.0.0.2:1", "box", 0), peer("127.0.0.3:1", "box", 0), peer("10.0.0.9:1", "m9", 0)];
        label_and_count(&mut peers, &[job("j", "running", "127.0.0.2", 0)]);
        let labels: Vec<&str> = peers.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["127.0.0.2:1", "127.0.0.3:1", "m9"]);
        let jobs: Vec<Option<u32>> = peers.iter().map(|p| p.jobs).collect();
        assert_eq!(jobs, [Some(1), Some(0), Some(0)]);
    }

    #[test]
    fn a_vanished_peer_shows_unreachable_and_a_failed_job_stays() {
        let mut m = Memory::default();
        let view =
            |peers: Vec<PeerView>, jobs: Vec<JobView>| GridView { supernodes: vec![], peers, jobs, revoked: vec![] };
        let first = m.keep(
            view(
                vec![peer("10.0.0.1:1", "a", 0), peer("10.0.0.2:1", "b", 0)],
                vec![job("bad", "ended", "10.0.0.2", 1)],
            ),
            1000,
        );
        assert_eq!((first.peers.len(), first.jobs.len()), (2, 1));
        // b's daemon killed: the supernode dropped it; the failed job fell out of the history.
        let later = m.keep(view(vec![peer("10.0.0.1:1", "a", 0)], vec![job("ok", "ended", "10.0.0.1", 0)]), 61_000);
        let b = later.peers.iter().find(|p| p.address == "10.0.0.2:1").expect("b still shown");
        assert_eq!(b.status, "unreachable");
        assert!(b.error.as_deref().unwrap().contains("daemon stopped or was killed"), "{b:?}");
        assert_eq!((b.jobs, b.last_seen_ms), (None, 60_000));
        let ids: Vec<&str> = later.jobs.iter().map(|j| j.job.as_str()).collect();
        assert_eq!(ids, ["ok", "bad"]);
        // Forgotten after an hour.
        let much_later = m.keep(view(vec![peer("10.0.0.1:1", "a", 0)], vec![]), 1000 + DOWN_PEER_KEPT_MS + 1);
        assert_eq!(much_later.peers.len(), 1);
        assert_eq!(much_later.jobs.len(), 1, "failed jobs stay");
    }
}
