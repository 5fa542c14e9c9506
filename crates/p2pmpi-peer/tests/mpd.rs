//! A real peer daemon (MPD with its RS and FT), run in this test process on 127.0.0.1 with
//! ports chosen by the system and no supernode.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::config::Config;
use p2pmpi_peer::ft;
use p2pmpi_peer::home::{self, Home, MpdState};
use p2pmpi_peer::mpd;
use p2pmpi_wire::grid::{JobControl, JobEvent, LaunchSpec, MpdRequest, MpdResponse, RsRequest, RsResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn secret() -> GridSecret {
    GridSecret::from_phrase("mpd test grid")
}

/// A peer daemon running in a thread of this process; halted when dropped.
struct Daemon {
    state: MpdState,
    home: Home,
    done: std::sync::mpsc::Receiver<anyhow::Result<()>>,
    _dir: Tmp,
}

impl Daemon {
    /// Starts an MPD with `cfg` (ports, address, supernodes and cache file are set here) and
    /// waits, bounded, until it published its state.
    fn start(cfg: Config) -> Daemon {
        let dir = Tmp::new("mpd-home");
        let home = Home::new(dir.0.join("p2pmpi"));
        let config = Config {
            supernodes: vec![],
            mpd_port: 0,
            rs_port: 0,
            ft_port: 0,
            external_ip: Some(LOCAL),
            peer_cache: Some(dir.0.join("peer-cache.json")),
            ..cfg
        };
        let (tx, done) = std::sync::mpsc::channel();
        let opts = mpd::MpdOpts { config, home: home.clone(), secret: secret() };
        std::thread::spawn(move || {
            let _ = tx.send(mpd::run(opts));
        });
        let deadline = Instant::now() + T;
        let state = loop {
            if let Some(st) = home::read_json::<MpdState>(&home.mpd_state()) {
                break st;
            }
            if let Ok(r) = done.try_recv() {
                panic!("the MPD stopped at start: {r:?}");
            }
            assert!(Instant::now() < deadline, "the MPD did not publish {} in {T:?}", home.mpd_state().display());
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { state, home, done, _dir: dir }
    }

    fn rs(&self) -> SocketAddr {
        SocketAddr::new(LOCAL, self.state.rs_port)
    }

    /// Asks the RS for a reservation: Ok(P) or the refusal's reason.
    fn reserve(&self, ticket: Ticket) -> Result<u32, String> {
        let mut c = SecureConn::connect(self.rs(), &secret(), T).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        let req = RsRequest::Reserve { ticket, app: "test".into(), submitter: "127.0.0.1".into() };
        match c.call::<_, RsResponse>(&req).unwrap() {
            RsResponse::Ok { p, .. } => Ok(p),
            RsResponse::Nok { reason } => Err(reason),
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// Sends a launch and collects its events until the MPD closes the connection.
    fn launch(&self, spec: LaunchSpec) -> Vec<JobEvent> {
        let mut c = SecureConn::connect(self.state.mpd_addr(), &secret(), T).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        c.send(&MpdRequest::Launch(spec)).unwrap();
        let mut events = Vec::new();
        while let Ok(Some(ev)) = c.recv::<JobEvent>() {
            events.push(ev);
        }
        events
    }

    fn job_dir(&self, job: &str) -> PathBuf {
        self.home.jobs().join(job)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let r = mpd::call(Some(LOCAL), self.state.mpd_addr(), &secret(), &MpdRequest::Halt);
        if matches!(r, Ok(MpdResponse::Halting)) {
            let _ = self.done.recv_timeout(T);
        }
    }
}

fn spec(ticket: Ticket, job: &str, program: &str, ranks: Vec<u32>) -> LaunchSpec {
    LaunchSpec {
        ticket,
        job: job.into(),
        app: "test".into(),
        program: program.into(),
        args: vec![],
        size: ranks.len() as u32 + 1,
        ranks,
        root: "127.0.0.1:1".into(),
        job_key: p2pmpi_wire::auth::JobKey::from_bytes([7; 32]),
        env: vec![],
        collect: vec![],
    }
}

fn refusal(events: &[JobEvent]) -> &str {
    match events {
        [JobEvent::Refused(why)] => why,
        other => panic!("expected one refusal, got {other:?}"),
    }
}

/// Stages a file by hand into a job's directory on the daemon.
fn put(d: &Daemon, job: &str, name: &str, content: &[u8], mode: u32) {
    std::fs::create_dir_all(d.job_dir(job)).unwrap();
    let path = d.job_dir(job).join(name);
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn stat_apps(d: &Daemon) -> usize {
    match mpd::call(Some(LOCAL), d.state.mpd_addr(), &secret(), &MpdRequest::Stat).unwrap() {
        MpdResponse::Stat { apps, .. } => apps.len(),
        other => panic!("unexpected answer {other:?}"),
    }
}

/// Issue 13, item 4: every way a launch ends — each refusal after the claim, a process that
/// cannot start, the job's normal end — releases the reservation it claimed, so with
/// `MAX_JOBS=1` the host can be reserved again right after; the job's directory goes too.
#[test]
fn mpd_every_launch_releases_its_reservation() {
    let d = Daemon::start(Config { max_jobs: 1, max_processes_per_job: 1, ..Config::default() });
    let job = "0abc";
    let cases: [(&str, &str, Vec<u32>, &str); 5] = [
        (job, "prog", vec![1, 2], "2 processes asked, MAX_PROCESSES_PER_JOB is 1"),
        ("NOT-HEX", "prog", vec![1], "invalid job id"),
        (job, "prog", vec![1], "program prog was not staged"),
        (job, "../escape", vec![1], "refused file name"),
        // Staged but not executable: the process cannot start.
        (job, "data", vec![1], "cannot start data"),
    ];
    for (i, (job, program, ranks, why)) in cases.into_iter().enumerate() {
        let ticket = Ticket(1 + i as u128);
        assert_eq!(d.reserve(ticket), Ok(1), "case {i}: the host is still held by the previous case");
        assert_eq!(d.reserve(Ticket(99)), Err("MAX_JOBS (1) reached".into()), "case {i}: the host is held");
        put(&d, "0abc", "data", b"not a program", 0o644);
        let events = d.launch(spec(ticket, job, program, ranks));
        let got = refusal(&events);
        assert!(got.contains(why), "case {i}: refusal {got:?} does not say {why:?}");
        assert_eq!(d.job_dir("0abc").exists(), job != "0abc", "case {i}: the refused job's directory is removed");
        // The claimed reservation is gone: a launch with it finds none.
        let again = d.launch(spec(ticket, job, program, vec![1]));
        assert!(refusal(&again).contains("no reservation holds this ticket"), "case {i}: {again:?}");
    }

    // A job that runs and ends releases its reservation too, and leaves nothing.
    let ticket = Ticket(50);
    assert_eq!(d.reserve(ticket), Ok(1), "the host is still held after the last refusal");
    put(&d, job, "prog", b"#!/bin/sh\necho hello\n", 0o755);
    let events = d.launch(spec(ticket, job, "prog", vec![1]));
    assert!(matches!(events.first(), Some(JobEvent::Started { rank: 1, .. })), "{events:?}");
    assert!(events.contains(&JobEvent::Output { rank: 1, stderr: false, data: b"hello\n".to_vec() }), "{events:?}");
    assert!(events.contains(&JobEvent::Exited { rank: 1, code: Some(0), signal: None }), "{events:?}");
    assert_eq!(d.reserve(Ticket(51)), Ok(1), "the host is still held after the job ended");
    assert!(!d.job_dir(job).exists());
    assert_eq!(stat_apps(&d), 0);
}

/// A second launch on a reservation that is running is refused, and its refusal leaves the
/// running job alone: its reservation, its directory, its processes.
#[test]
fn mpd_a_second_launch_of_a_running_reservation_is_refused() {
    let d = Daemon::start(Config { max_jobs: 1, max_processes_per_job: 1, ..Config::default() });
    let job = "0abc";
    put(&d, job, "prog", b"#!/bin/sh\nexec sleep 60\n", 0o755);
    let ticket = Ticket(7);
    d.reserve(ticket).unwrap();
    let mut first = SecureConn::connect(d.state.mpd_addr(), &secret(), T).unwrap();
    first.set_read_timeout(Some(T)).unwrap();
    first.send(&MpdRequest::Launch(spec(ticket, job, "prog", vec![1]))).unwrap();
    assert!(matches!(first.recv::<JobEvent>().unwrap(), Some(JobEvent::Started { rank: 1, .. })));

    let second = d.launch(spec(ticket, job, "prog", vec![1, 2]));
    assert!(refusal(&second).contains("already running a launch here"), "{second:?}");
    assert!(d.job_dir(job).join("prog").is_file(), "the running job's directory is kept");
    assert_eq!(stat_apps(&d), 1);
    assert_eq!(d.reserve(Ticket(8)), Err("MAX_JOBS (1) reached".into()), "the running job still holds the host");

    first.send(&JobControl::Signal(libc::SIGKILL)).unwrap();
    let mut events = Vec::new();
    while let Ok(Some(ev)) = first.recv::<JobEvent>() {
        events.push(ev);
    }
    assert!(events.contains(&JobEvent::Exited { rank: 1, code: None, signal: Some(libc::SIGKILL) }), "{events:?}");
    assert_eq!(d.reserve(Ticket(8)), Ok(1));
}

/// Stages one small file for `job` under `ticket` through the daemon's FT.
fn stage(d: &Daemon, ticket: Ticket, job: &str, src: &Path) {
    std::fs::write(src.join("input"), b"input data").unwrap();
    let files = [ft::LocalFile::Path { name: "input".into(), path: src.join("input"), executable: false }];
    let metas = ft::describe(&files).unwrap();
    let ft_addr = SocketAddr::new(LOCAL, d.state.ft_port);
    ft::stage(ft_addr, &secret(), ticket, job, &files, &metas, T).unwrap();
    assert!(d.job_dir(job).join("input").is_file());
}

/// Files staged for a reservation that is cancelled, or lapses, before any launch do not stay
/// on the peer.
#[test]
fn mpd_files_staged_for_an_unused_reservation_are_removed() {
    let d = Daemon::start(Config { reservation_hold_ms: 500, ..Config::default() });
    let src = Tmp::new("mpd-src");

    // Cancelled: the files are gone when the RS answers.
    d.reserve(Ticket(1)).unwrap();
    stage(&d, Ticket(1), "0a01", &src.0);
    let mut c = SecureConn::connect(d.rs(), &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    assert_eq!(c.call::<_, RsResponse>(&RsRequest::Cancel { ticket: Ticket(1) }).unwrap(), RsResponse::Cancelled);
    assert!(!d.job_dir("0a01").exists(), "the cancelled reservation's files stayed");

    // Lapsed: the files go with the reservation (RESERVATION_HOLD = 0.5 s; waited for, bounded).
    d.reserve(Ticket(2)).unwrap();
    stage(&d, Ticket(2), "0a02", &src.0);
    let deadline = Instant::now() + T;
    while d.job_dir("0a02").exists() {
        assert!(Instant::now() < deadline, "the lapsed reservation's files stayed for {T:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let again = d.launch(spec(Ticket(2), "0a02", "input", vec![1]));
    assert!(refusal(&again).contains("no reservation holds this ticket"), "{again:?}");

    // A launched job keeps its files while it runs (and removes them at its end).
    d.reserve(Ticket(3)).unwrap();
    stage(&d, Ticket(3), "0a03", &src.0);
    put(&d, "0a03", "prog", b"#!/bin/sh\ncat input\n", 0o755);
    let events = d.launch(spec(Ticket(3), "0a03", "prog", vec![1]));
    assert!(events.contains(&JobEvent::Output { rank: 1, stderr: false, data: b"input data".to_vec() }), "{events:?}");
    assert!(!d.job_dir("0a03").exists());
}
