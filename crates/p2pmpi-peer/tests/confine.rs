//! Confined jobs (issue 38, item 1): a process confined as the MPD confines another
//! member's job tries to escape, and fails each time, while the daemon's files and the other
//! jobs are unharmed. The probes are shell commands; the confinement is the MPD's own
//! ([`Confiner::ruleset`] and [`Confiner::confine`], as `mpd::launch` applies them).
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::config::Config;
use p2pmpi_peer::confine::{kernel_abi, Confiner, JobPaths};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Site {
    _tmp: Tmp,
    /// Stands for the daemon's directory (configuration, keys, state).
    daemon: PathBuf,
    job: JobPaths,
    other_job: PathBuf,
}

fn site(name: &str) -> Site {
    let tmp = Tmp::new(name);
    let daemon = tmp.0.join("p2pmpi");
    let jobs = daemon.join("jobs");
    let job = jobs.join("job-a");
    let other_job = jobs.join("job-b");
    for d in [&job, &other_job, &job.join(".tmp"), &tmp.0.join("shm-a")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(daemon.join("P2P-MPI.conf"), "GRID_SECRET=the grid's secret\n").unwrap();
    std::fs::write(other_job.join("data"), "other job's data\n").unwrap();
    let job = JobPaths { job_dir: job.clone(), tmp: job.join(".tmp"), shm: tmp.0.join("shm-a"), connect: vec![] };
    Site { daemon, job, other_job, _tmp: tmp }
}

fn confiner(cfg: &Config) -> Confiner {
    Confiner::from_config(cfg)
}

/// Runs `script` with `sh -c`, confined by `c` for `site`'s job, in its directory.
fn run(c: &Confiner, site: &Site, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script]).current_dir(&site.job.job_dir).stdin(Stdio::null());
    c.confine(&mut cmd, c.ruleset(&site.job).unwrap());
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether a test that needs something this host lacks (`lacks`: what and why) runs: outside CI
/// it says so ("SKIPPED: …") and the caller returns; under CI (`CI=true`), whose machines have
/// Landlock, root and perl (`.ci/run` checks), it fails instead.
fn require(lacks: Option<&str>) -> bool {
    let Some(why) = lacks else { return true };
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{test} {why}; under CI (CI=true) it must run");
    eprintln!("SKIPPED: {test} {why}");
    false
}

fn landlock() -> bool {
    require((kernel_abi() == 0).then_some("needs Landlock in the kernel (no Landlock here)"))
}

#[test]
fn a_confined_job_reads_and_writes_only_its_own_places() {
    if !landlock() {
        return;
    }
    let s = site("confine-fs");
    let c = confiner(&Config::default());
    // What it may do: run programs, read the system, write its directory, its temporary
    // directory and its segments.
    let script = format!(
        "echo hi > out && cat out && echo t > {}/x && echo s > {}/seg && head -c 4 /dev/urandom >/dev/null && ls /usr/bin >/dev/null",
        s.job.tmp.display(),
        s.job.shm.display()
    );
    let o = run(&c, &s, &script);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n");
    // What it may not: the configuration, the daemon's directory, another job, outside.
    let conf = s.daemon.join("P2P-MPI.conf");
    for (what, script) in [
        ("read the configuration", format!("cat {}", conf.display())),
        ("list the daemon's directory", format!("ls {}", s.daemon.display())),
        ("read another job's files", format!("cat {}/data", s.other_job.display())),
        ("write another job's directory", format!("echo x > {}/planted", s.other_job.display())),
        ("write outside its directories", format!("echo x > {}/planted", s.daemon.display())),
        ("write /tmp", "echo x > /tmp/p2pmpi-confine-planted".to_string()),
        ("read /etc/shadow", "cat /etc/shadow".to_string()),
    ] {
        let o = run(&c, &s, &script);
        assert!(!o.status.success(), "it could {what}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("ermission denied"), "{what}: {}", text(&o));
    }
    assert!(!s.daemon.join("planted").exists() && !s.other_job.join("planted").exists());
    assert!(!Path::new("/tmp/p2pmpi-confine-planted").exists());
    assert_eq!(std::fs::read_to_string(s.other_job.join("data")).unwrap(), "other job's data\n");
}

#[test]
fn a_confined_job_cannot_read_the_environment_of_or_signal_others() {
    if !landlock() {
        return;
    }
    let s = site("confine-proc");
    let c = confiner(&Config::default());
    // Another job's process (unconfined here, as the daemon), with a secret in its
    // environment.
    let mut other = Command::new("sleep").arg("60").env("OTHER_JOB_KEY", "s3cret").spawn().unwrap();
    let pid = other.id();
    let me = std::process::id();
    for (what, script) in [
        ("read another job's environ", format!("cat /proc/{pid}/environ")),
        ("read another job's status", format!("cat /proc/{pid}/status")),
        ("read the daemon's environ", format!("cat /proc/{me}/environ")),
        ("read the daemon's memory", format!("head -c 1 /proc/{me}/mem")),
    ] {
        let o = run(&c, &s, &script);
        assert!(!o.status.success(), "it could {what}: {}", text(&o));
        assert!(!String::from_utf8_lossy(&o.stdout).contains("s3cret"));
    }
    if c.abi >= 6 {
        for (what, target) in [("signal another job", pid), ("signal the daemon", me)] {
            let o = run(&c, &s, &format!("kill -TERM {target}"));
            assert!(!o.status.success(), "it could {what}: {}", text(&o));
        }
        assert!(other.try_wait().unwrap().is_none(), "the other job's process was killed");
        // Its own processes it may signal.
        let o = run(&c, &s, "sleep 30 & kill -TERM $! && wait $!; echo waited");
        assert!(String::from_utf8_lossy(&o.stdout).contains("waited"), "{}", text(&o));
    }
    let _ = other.kill();
    let _ = other.wait();
}

#[test]
fn limits_stop_a_job_that_exceeds_them() {
    let s = site("confine-limits");
    let cfg = Config { job_memory_mb: 64, job_file_mb: 1, job_cpu_seconds: 1, ..Config::default() };
    let c = confiner(&cfg);
    // Memory: a 256 MiB allocation fails.
    let o = run(&c, &s, "ulimit -v; x=$(head -c 268435456 /dev/zero | tr '\\0' a) && echo allocated");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().next(), Some("65536"), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("allocated"), "{}", text(&o));
    // A file past 1 MiB.
    let o = run(&c, &s, "head -c 2097152 /dev/zero > big");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(std::fs::metadata(s.job.job_dir.join("big")).unwrap().len() <= 1 << 20);
    // CPU: a busy loop is stopped (SIGXCPU) within a few seconds.
    let t = Instant::now();
    let o = run(&c, &s, "while :; do :; done");
    assert!(!o.status.success());
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // No core dump, and the limits cannot be raised again.
    let o = run(&c, &s, "ulimit -c; ulimit -c unlimited && echo raised");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().next(), Some("0"), "{}", text(&o));
    if !p2pmpi_peer::os::is_root() {
        // (Root may raise its hard limits: see docs/security.md, the per-job uid.)
        assert!(!String::from_utf8_lossy(&o.stdout).contains("raised"), "{}", text(&o));
    }
    // no_new_privs (read by the shell itself: its own /proc entries are readable).
    let o = run(&c, &s, "while read k v; do [ \"$k\" = NoNewPrivs: ] && echo \"$v\"; done < /proc/self/status");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1", "{}", text(&o));
}

#[test]
fn a_lower_abi_is_used_when_forced_and_no_landlock_refuses_unless_allowed() {
    let kernel = kernel_abi();
    let c = confiner(&Config { job_landlock_abi: Some(1), ..Config::default() });
    assert_eq!(c.abi, kernel.min(1));
    if kernel > 0 {
        assert!(c.unenforced().iter().any(|w| w.contains("signals")), "{:?}", c.unenforced());
        // ABI 1 still keeps files apart.
        let s = site("confine-abi1");
        let o = run(&c, &s, &format!("cat {}/P2P-MPI.conf", s.daemon.display()));
        assert!(!o.status.success(), "{}", text(&o));
    }
    let none = confiner(&Config { job_landlock_abi: Some(0), ..Config::default() });
    assert_eq!(none.abi, 0);
    assert!(none.refusal().unwrap().contains("ALLOW_UNCONFINED_JOBS"));
    let allowed = confiner(&Config { job_landlock_abi: Some(0), allow_unconfined_jobs: true, ..Config::default() });
    assert!(allowed.refusal().is_none());
    assert!(confiner(&Config::default()).refusal().is_none() || kernel == 0);
}

/// The start-up cost of confinement: median of many launches of `true` as the MPD launches a
/// process (with `die_with_parent`), unconfined, confined (Landlock, limits, `no_new_privs`),
/// and confined in a control group of its own.
#[test]
fn confinement_costs_little_at_start() {
    if !landlock() {
        return;
    }
    let s = site("confine-cost");
    let c = confiner(&Config { job_processes: 64, ..Config::default() });
    let cg = c.job_cgroup("job-cost", 1).unwrap();
    let median = |confined: bool, group: Option<&p2pmpi_peer::confine::JobCgroup>| {
        let mut v: Vec<Duration> = (0..100)
            .map(|_| {
                let t = Instant::now();
                let mut cmd = Command::new("/bin/true");
                // As the MPD starts every process, confined or not (a fork, not a vfork).
                p2pmpi_peer::os::die_with_parent(&mut cmd);
                if confined {
                    c.confine_in(&mut cmd, c.ruleset(&s.job).unwrap(), group).unwrap();
                }
                assert!(cmd.status().unwrap().success());
                t.elapsed()
            })
            .collect();
        v.sort();
        v[v.len() / 2]
    };
    let (plain, confined, grouped) = (median(false, None), median(true, None), median(true, cg.as_ref()));
    let mut build: Vec<Duration> = (0..100)
        .map(|_| {
            let t = Instant::now();
            drop(c.ruleset(&s.job).unwrap());
            t.elapsed()
        })
        .collect();
    build.sort();
    let build = build[50];
    eprintln!(
        "start-up: {plain:?} plain, {confined:?} confined, {grouped:?} confined in a control group, \
         of which {build:?} building the ruleset (medians of 100)"
    );
    assert!(confined < plain + Duration::from_millis(20), "{plain:?} plain, {confined:?} confined");
    assert!(grouped < plain + Duration::from_millis(20), "{plain:?} plain, {grouped:?} in a control group");
}

#[test]
fn as_root_a_job_runs_as_a_user_of_its_own_bounded_in_processes() {
    if !require((!p2pmpi_peer::os::is_root()).then_some("needs root (jobs run as users of their own only then)")) {
        return;
    }
    let s = site("confine-uid");
    let c = confiner(&Config { job_processes: 8, job_uids: Some((3_000_000, 3_000_999)), ..Config::default() });
    let uid = c.uid_for("job-a").unwrap();
    assert!((3_000_000..=3_000_999).contains(&uid));
    assert_eq!(c.uid_for("job-a"), Some(uid), "one user per job, the same for every daemon");
    // A staged file stays the daemon's, readable; the directories become the job's.
    std::fs::write(s.job.job_dir.join("staged"), "input\n").unwrap();
    let script = "id -u; cat staged; echo out > written && echo wrote; echo x >> staged || echo refused; \
                  i=0; while [ $i -lt 20 ]; do sleep 2 & i=$((i+1)); done; echo forked";
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script]).current_dir(&s.job.job_dir).stdin(Stdio::null());
    c.run_as(&mut cmd, uid, &s.job).unwrap();
    c.confine(&mut cmd, c.ruleset(&s.job).unwrap());
    let o = cmd.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(uid.to_string().as_str()), "{}", text(&o));
    assert_eq!(lines.next(), Some("input"), "{}", text(&o));
    assert!(out.contains("wrote") && out.contains("refused"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(s.job.job_dir.join("staged")).unwrap(), "input\n");
    // JOB_PROCESSES=8: the user's ninth process cannot start.
    assert!(String::from_utf8_lossy(&o.stderr).to_lowercase().contains("fork"), "{}", text(&o));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(s.job.job_dir.join("written")).unwrap().uid(), uid);
    // A job directory closed to other users is refused with its name.
    let closed = Tmp::new("confine-closed");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&closed.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    let inner =
        JobPaths { job_dir: closed.0.join("j"), tmp: closed.0.join("j/.tmp"), shm: s.job.shm.clone(), connect: vec![] };
    std::fs::create_dir_all(&inner.tmp).unwrap();
    let e = c.run_as(&mut Command::new("true"), uid, &inner).unwrap_err();
    assert!(e.to_string().contains("closed to other users"), "{e}");
}

#[test]
fn a_confined_job_binds_tcp_ports_of_its_range_only() {
    if !require((kernel_abi() < 4).then_some("needs Landlock ABI 4 or more (TCP rules)"))
        || !require((!Path::new("/usr/bin/perl").exists()).then_some("needs perl (/usr/bin/perl) to bind sockets"))
    {
        return;
    }
    let s = site("confine-bind");
    let b = free_base(&[6]);
    let c = confiner(&Config { min_port: b + 1, max_port: b + 10, ..Config::default() });
    let bind = |port: u16| {
        let script = format!(
            "/usr/bin/perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die; \
             bind(S, pack_sockaddr_in({port}, inet_aton(\"127.0.0.1\"))) or die \"bind: $!\\n\"; print \"bound\\n\"'"
        );
        run(&c, &s, &script)
    };
    for port in [b + 6, 0] {
        let o = bind(port);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "bound\n", "port {port}: {}", text(&o));
    }
    for port in [b, b + 11, 8080] {
        let o = bind(port);
        assert!(!o.status.success(), "port {port}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("ermission denied"), "port {port}: {}", text(&o));
    }
}

#[test]
fn staged_files_shared_with_other_jobs_are_copied_before_a_job_may_write_them() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let s = site("confine-unshare");
    // The FT cache's entry, hard-linked into the job directory (and, say, another job's).
    let cache = s.daemon.join("cache-entry");
    std::fs::write(&cache, "cached content\n").unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(s.job.job_dir.join("sub")).unwrap();
    std::fs::hard_link(&cache, s.job.job_dir.join("prog")).unwrap();
    std::fs::hard_link(&cache, s.job.job_dir.join("sub/input")).unwrap();
    std::fs::hard_link(&cache, s.other_job.join("prog")).unwrap();
    std::fs::write(s.job.job_dir.join("own"), "own\n").unwrap();
    let copied = p2pmpi_peer::confine::unshare_files(&s.job.job_dir).unwrap();
    assert_eq!(copied, 2 * "cached content\n".len() as u64);
    for f in ["prog", "sub/input"] {
        let m = std::fs::metadata(s.job.job_dir.join(f)).unwrap();
        assert_eq!((m.nlink(), m.permissions().mode() & 0o777), (1, 0o755), "{f}");
    }
    std::fs::write(s.job.job_dir.join("prog"), "tampered\n").unwrap();
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), "cached content\n");
    assert_eq!(std::fs::read_to_string(s.other_job.join("prog")).unwrap(), "cached content\n");
    assert_eq!(std::fs::metadata(&cache).unwrap().nlink(), 2, "only the other job's link is left");
}

/// A base port below the kernel's ephemeral range (32 768 on), whose ports `base + offsets`
/// were all free when chosen: a port there is taken only by an explicit bind, never as the
/// source port of a concurrent test's connection (which made fixed ports in the 47 000s fail
/// with "address in use"). The start depends on the process, so concurrent tests differ.
fn free_base(offsets: &[u16]) -> u16 {
    let seed = std::process::id() as u16;
    for i in 0..500u16 {
        let base = 21_000 + (seed.wrapping_add(i.wrapping_mul(211)) % 110) * 100;
        if offsets.iter().all(|o| std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok()) {
            return base;
        }
    }
    panic!("no free range of ports below 32768");
}

fn perl() -> bool {
    require((!Path::new("/usr/bin/perl").exists()).then_some("needs perl (/usr/bin/perl) to open sockets"))
}

/// A perl one-liner that connects to 127.0.0.1:`port` and prints `connected`.
fn connect_script(port: u16) -> String {
    format!(
        "/usr/bin/perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die; \
         connect(S, pack_sockaddr_in({port}, inet_aton(\"127.0.0.1\"))) or die \"connect: $!\\n\"; print \"connected\\n\"'"
    )
}

/// A perl one-liner that binds 127.0.0.1:`port` and prints `bound`.
fn bind_script(port: u16) -> String {
    format!(
        "/usr/bin/perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die; \
         bind(S, pack_sockaddr_in({port}, inet_aton(\"127.0.0.1\"))) or die \"bind: $!\\n\"; print \"bound\\n\"'"
    )
}

#[test]
fn a_confined_job_connects_to_its_jobs_ports_only() {
    if !require((kernel_abi() < 4).then_some("needs Landlock ABI 4 or more (TCP rules)")) || !perl() {
        return;
    }
    let s = site("confine-connect");
    // The grid's range b..b+9, of which b+9 is this daemon's MPD port; b+100 an extra port of
    // the owner's (JOB_CONNECT_PORTS); the launcher's control port, the job's own.
    let b = free_base(&[3, 4, 8, 9, 100]);
    let listen = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (data, mpd, extra, launcher, other) = (listen(b + 3), listen(b + 9), listen(b + 100), listen(0), listen(0));
    let port = |l: &std::net::TcpListener| l.local_addr().unwrap().port();
    let cfg = Config {
        min_port: b,
        max_port: b + 9,
        mpd_port: b + 9,
        rs_port: b + 8,
        job_connect_ports: vec![(b + 100, b + 100)],
        ..Config::default()
    };
    let c = confiner(&cfg);
    let job = JobPaths { connect: vec![port(&launcher)], ..s.job.clone() };
    let run_job = |script: &str| {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]).current_dir(&job.job_dir).stdin(Stdio::null());
        c.confine(&mut cmd, c.ruleset(&job).unwrap());
        cmd.output().unwrap()
    };
    for (what, p) in [
        ("another rank's data port", port(&data)),
        ("its launcher", port(&launcher)),
        ("an owner's port", port(&extra)),
    ] {
        let o = run_job(&connect_script(p));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "connected\n", "{what} ({p}): {}", text(&o));
    }
    for (what, p) in [("the MPD", port(&mpd)), ("a port of no job", port(&other)), ("ssh", 22)] {
        let o = run_job(&connect_script(p));
        assert!(!o.status.success(), "it could connect to {what} ({p}): {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("ermission denied"), "{what}: {}", text(&o));
    }
    // It binds the grid's ports but the daemon's service ports (which no process may connect
    // to: a rank listening there would be cut off; the MPI library takes the next port).
    let o = run_job(&bind_script(b + 4));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bound\n", "{}", text(&o));
    let o = run_job(&bind_script(b + 8));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ermission denied"), "the RS's port: {}", text(&o));
    // Nothing reached the refused listener; the others are unharmed and still accept.
    other.set_nonblocking(true).unwrap();
    assert!(other.accept().is_err(), "a refused connection got through");
    // A forced lower ABI (3) has no TCP rules: the daemon says so, and connect is free.
    let low = confiner(&Config { job_landlock_abi: Some(3), ..cfg.clone() });
    assert!(low.unenforced().iter().any(|w| w.contains("TCP")), "{:?}", low.unenforced());
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", &connect_script(port(&other))]).current_dir(&job.job_dir).stdin(Stdio::null());
    low.confine(&mut cmd, low.ruleset(&job).unwrap());
    let o = cmd.output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "connected\n", "{}", text(&o));
    drop((data, mpd, extra, launcher));
}

fn cgroups(c: &Confiner) -> bool {
    require((!c.cgroups.available()).then_some("needs control groups (pids, memory) it may make (root)"))
}

/// Runs `script` in `job`'s control group `cg`, confined by `c`.
fn spawn_in(c: &Confiner, s: &Site, cg: &p2pmpi_peer::confine::JobCgroup, script: &str) -> std::process::Child {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .current_dir(&s.job.job_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.confine_in(&mut cmd, c.ruleset(&s.job).unwrap(), Some(cg)).unwrap();
    cmd.spawn().unwrap()
}

#[test]
fn a_fork_bomb_is_bounded_per_job_and_the_other_jobs_still_fork() {
    let s = site("confine-forks");
    let c = confiner(&Config { job_processes: 16, ..Config::default() });
    if !cgroups(&c) {
        return;
    }
    let bomb = c.job_cgroup("job-a", 1).unwrap().expect("a control group for JOB_PROCESSES");
    // 200 background processes asked, in a job with room for 16.
    let o = spawn_in(
        &c,
        &s,
        &bomb,
        "i=0; while [ $i -lt 200 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); done; echo tried",
    )
    .wait_with_output()
    .unwrap();
    let refused = bomb.events().forks_refused;
    assert!(refused > 0, "no fork refused: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).to_lowercase().contains("fork"), "{}", text(&o));
    // The other job, in a group of its own, forks as usual while the bomb's children live.
    let other = c.job_cgroup("job-b", 1).unwrap().unwrap();
    let o = spawn_in(&c, &s, &other, "sleep 0.1 & sleep 0.1 & wait; echo forked").wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "forked\n", "{}", text(&o));
    assert_eq!(other.events().forks_refused, 0);
    // The job's end kills what it left running (dead: gone, or a zombie not yet reaped).
    let left = bomb.pids();
    assert!(!left.is_empty() && left.len() <= 16, "{left:?}");
    drop(bomb);
    let alive = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|st| st.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    };
    let t = Instant::now();
    while left.iter().any(alive) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!left.iter().any(alive), "the bomb's processes were left: {left:?}");
}

#[test]
fn a_job_past_its_memory_is_killed_and_the_kill_is_counted() {
    let s = site("confine-oom");
    // 64 MiB per process: three processes of 40 MiB each fit their own limit, not the job's.
    let c = confiner(&Config { job_memory_mb: 64, ..Config::default() });
    if !cgroups(&c) {
        return;
    }
    let cg = c.job_cgroup("job-a", 1).unwrap().expect("a control group for JOB_MEMORY_MB");
    let script = "for i in 1 2 3; do head -c 41943040 /dev/zero | tail > /dev/null & done; wait; echo survived";
    let o = spawn_in(&c, &s, &cg, script).wait_with_output().unwrap();
    assert!(cg.events().oom_kills > 0, "nothing killed: {}", text(&o));
    // One process alone stays within both limits.
    let one = c.job_cgroup("job-b", 1).unwrap().unwrap();
    let o = spawn_in(&c, &s, &one, "head -c 41943040 /dev/zero | tail | wc -c").wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "41943040", "{}", text(&o));
    assert_eq!(one.events().oom_kills, 0);
}

#[test]
fn a_daemon_as_root_never_runs_a_job_as_root() {
    let c = confiner(&Config::default());
    if p2pmpi_peer::os::is_root() {
        // No JOB_UIDS: the default range.
        assert_eq!(c.uids, Some(p2pmpi_peer::config::SUGGESTED_JOB_UIDS));
        let uid = c.uid_for("0123456789abcdef").unwrap();
        assert!(uid >= p2pmpi_peer::config::SUGGESTED_JOB_UIDS.0, "{uid}");
    } else {
        assert_eq!(c.uids, None, "only root can give a job a user of its own");
    }
}

#[test]
fn the_owners_read_paths_are_readable_and_nothing_writable_there() {
    if !landlock() {
        return;
    }
    let s = site("confine-readpaths");
    // A shared environment the owner lends (JOB_READ_PATHS), beside a directory it does not.
    let shared = s.daemon.parent().unwrap().join("shared-env");
    let private = s.daemon.parent().unwrap().join("private");
    for d in [&shared, &private] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("lib.py"), "x = 1\n").unwrap();
    }
    let c = confiner(&Config { job_read_paths: vec![shared.clone()], ..Config::default() });
    let o = run(&c, &s, &format!("cat {}/lib.py", shared.display()));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "x = 1\n", "{}", text(&o));
    for (what, script) in [
        ("write the shared environment", format!("echo y > {}/lib.py", shared.display())),
        ("read a path not lent", format!("cat {}/lib.py", private.display())),
        ("list the daemon user's home", format!("ls {}", std::env::var("HOME").unwrap_or("/root".into()))),
    ] {
        let o = run(&c, &s, &script);
        assert!(!o.status.success(), "it could {what}: {}", text(&o));
    }
    assert_eq!(std::fs::read_to_string(shared.join("lib.py")).unwrap(), "x = 1\n");
}
