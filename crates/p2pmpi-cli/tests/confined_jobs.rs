//! Confined jobs on a local grid (issue 38, item 1): a process an MPD starts for a job tries
//! to read the peer's configuration, its state, its key, the user's home, another job's files
//! and the MPD's environment, to signal the MPD or another running job, to write outside its
//! directory, to connect to ports of no job, to fork without bound, to allocate past
//! `JOB_MEMORY_MB` and to run past `JOB_CPU_SECONDS`: each is refused, while the daemon and the other jobs are unharmed. A peer
//! told that its kernel has no Landlock (`JOB_LANDLOCK_ABI=0`) refuses the job unless
//! `ALLOW_UNCONFINED_JOBS=yes`.
#![forbid(unsafe_code)]

mod common;

use common::example;
use common::grid::TestGrid;

/// Landlock is a kernel feature: outside CI a kernel without it skips these tests, saying so;
/// under CI (whose machines have it) they fail instead.
fn landlock() -> bool {
    common::require((p2pmpi_peer::confine::kernel_abi() == 0).then(|| "needs Landlock in the kernel".to_string()))
}

fn line<'a>(out: &'a str, probe: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(&format!("rank 1 {probe}:"))).unwrap_or_else(|| panic!("no {probe}:\n{out}"))
}

#[test]
fn a_job_on_a_peer_cannot_escape_its_directory() {
    if !landlock() {
        return;
    }
    let g = TestGrid::start("confined", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    // (As root the daemon runs the job as a user of its own without being told: JOB_UIDS is
    // not set.)
    // Another job's directory on peer 2, with a file.
    let other = g.home(2).join("jobs").join("0123456789abcdef");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("data"), "other job\n").unwrap();
    let conf = g.conf(2);
    let state = g.home(2).join("mpd.json");
    // A member key where a member-mode peer keeps it (0600, as `p2pmpi init` writes it).
    let key = g.home(2).join("keys").join("member.key");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "private key\n").unwrap();
    let user_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let planted = g.home(2).join("planted");
    let probes = [
        format!("read:{}", conf.display()),
        format!("read:{}", state.display()),
        format!("list:{}", g.home(2).display()),
        format!("read:{}", other.join("data").display()),
        format!("write:{}", other.join("planted").display()),
        format!("write:{}", planted.display()),
        "write:/tmp/p2pmpi-confined-planted".to_string(),
        "read:/etc/shadow".to_string(),
        format!("read:{}", key.display()),
        format!("list:{user_home}"),
        "environ:parent".to_string(),
        "signal:parent".to_string(),
        "own-status".to_string(),
        "write-own".to_string(),
        "uid".to_string(),
    ];
    let prog = example("probe_escape");
    let mut args = vec!["-n", "2", prog.to_str().unwrap()];
    args.extend(probes.iter().map(String::as_str));
    let out = g.run(&args);
    out.assert_ok();
    for p in &probes[..12] {
        let l = line(&out.stdout, p);
        assert!(l.contains("denied"), "{l}\n{}", out.stdout);
    }
    for p in &probes[12..] {
        let l = line(&out.stdout, p);
        assert!(l.ends_with("allowed"), "{l}\n{}", out.stdout);
    }
    if p2pmpi_peer::os::is_root() {
        // A daemon running as root runs the job as a user of its own (the default JOB_UIDS).
        let uid = out.stdout.lines().find_map(|l| l.strip_prefix("rank 1 uid ")).unwrap_or("?");
        let uid: u32 = uid.parse().unwrap_or_else(|_| panic!("{}", out.stdout));
        let (first, last) = p2pmpi_peer::config::SUGGESTED_JOB_UIDS;
        assert!((first..=last).contains(&uid), "{}", out.stdout);
    }
    assert!(!planted.exists() && !other.join("planted").exists());
    assert!(!std::path::Path::new("/tmp/p2pmpi-confined-planted").exists());
    assert_eq!(std::fs::read_to_string(other.join("data")).unwrap(), "other job\n");
    // (As root the jobs' directories may be outside the grid's directory: not left behind.)
    std::fs::remove_dir_all(&other).unwrap();
    // The daemon is unharmed: it runs the next job.
    let pi = example("pi");
    let out = g.run(&["-n", "2", pi.to_str().unwrap()]);
    out.assert_ok();
    assert!(out.stdout.contains("3.14159"), "{}", out.stdout);
    // As root, a peer whose directory is closed to other users keeps its jobs' directories in
    // /var/lib/p2pmpi/jobs-HASH (`jobs` links there): stopped, it leaves nothing there.
    let relocated: Vec<std::path::PathBuf> =
        (1..=2).filter_map(|p| std::fs::read_link(g.home(p).join("jobs")).ok()).collect();
    if p2pmpi_peer::os::is_root() {
        assert_eq!(relocated.len(), 2, "the peers' jobs were not relocated");
    }
    drop(g);
    for r in &relocated {
        assert!(!r.exists(), "{} left behind", r.display());
    }
}

#[test]
fn a_job_past_its_memory_limit_is_stopped_with_a_message() {
    let g = TestGrid::start("confined-mem", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    g.reconfigure(2, &["JOB_MEMORY_MB=256", "JOB_CPU_SECONDS=1"]);
    g.wait_hosts(1, 1);
    let prog = example("probe_escape");
    let out = g.run(&["-n", "2", prog.to_str().unwrap(), "alloc:16"]);
    out.assert_ok();
    assert!(line(&out.stdout, "alloc:16").ends_with("allowed"), "{}", out.stdout);
    let out = g.run(&["-n", "2", prog.to_str().unwrap(), "alloc:1024"]);
    assert!(!out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("JOB_MEMORY_MB=256"), "{}", out.stderr);
    // Past its CPU time: stopped by the kernel, and told.
    let out = g.run(&["-n", "2", prog.to_str().unwrap(), "spin"]);
    assert!(!out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("rank 1 stopped: CPU time limit exceeded (JOB_CPU_SECONDS=1)"), "{}", out.stderr);
}

#[test]
fn without_landlock_a_peer_refuses_jobs_unless_allowed() {
    let g = TestGrid::start("unconfined", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    g.reconfigure(2, &["JOB_LANDLOCK_ABI=0"]);
    g.wait_hosts(1, 1);
    assert!(g.log(2).contains("no Landlock"), "{}", g.log(2));
    let pi = example("pi");
    let out = g.run(&["-n", "2", pi.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("ALLOW_UNCONFINED_JOBS"), "{}", out.stderr);
    g.reconfigure(2, &["ALLOW_UNCONFINED_JOBS=yes"]);
    g.wait_hosts(1, 1);
    let out = g.run(&["-n", "2", pi.to_str().unwrap()]);
    out.assert_ok();
    assert!(out.stdout.contains("3.14159"), "{}", out.stdout);
}

/// The first line of `reader` that starts with `prefix` (within the test's time).
fn wait_line(reader: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut l = String::new();
    loop {
        l.clear();
        assert!(reader.read_line(&mut l).unwrap() > 0, "no line {prefix}");
        if l.starts_with(prefix) {
            return l.trim_end().to_string();
        }
    }
}

#[test]
fn a_job_cannot_reach_another_running_job_other_ports_or_fork_without_bound() {
    if !landlock() {
        return;
    }
    let g = TestGrid::start("confined-two", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    g.reconfigure(2, &["JOB_PROCESSES=48"]);
    g.wait_hosts(1, 1);
    let prog = example("probe_escape");
    // Job A runs on peer 2 until the test lets it go, and says where it is.
    let mut a = std::process::Command::new(common::grid::bin("p2pmpirun"))
        .args(["-n", "2", prog.to_str().unwrap(), "whoami", "wait-file:go"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out_a = std::io::BufReader::new(a.stdout.take().unwrap());
    let me = wait_line(&mut out_a, "rank 1 pid ");
    let mut words = me.split_whitespace().skip(3);
    let (pid, dir) = (words.next().unwrap().to_string(), words.nth(1).unwrap().to_string());
    // Job B, also on peer 2, tries job A, peer 2's daemon ports, a port of no job, and forks.
    let mpd = g.home(2).join("mpd.json");
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&mpd).unwrap()).unwrap();
    let ip = state["ip"].as_str().unwrap().to_string();
    let stranger = std::net::TcpListener::bind((ip.as_str(), 0)).unwrap();
    let probes = [
        format!("environ:{pid}"),
        format!("signal:{pid}"),
        format!("list:{dir}"),
        format!("write:{dir}/planted"),
        format!("connect:{ip}:{}", state["mpd_port"]),
        format!("connect:{ip}:{}", state["ft_port"]),
        format!("connect:{}", stranger.local_addr().unwrap()),
        "fork:200".to_string(),
        "fork:2".to_string(),
    ];
    // Without checkpoints on the grid: a job that keeps them may reach the FT ports of its hosts.
    let mut args = vec!["--checkpoint-copies", "0", "-n", "2", prog.to_str().unwrap()];
    args.extend(probes.iter().map(String::as_str));
    let out = g.run(&args);
    out.assert_ok();
    for p in &probes[..8] {
        let l = line(&out.stdout, p);
        assert!(l.contains("denied"), "{l}\n{}", out.stdout);
    }
    assert!(line(&out.stdout, "fork:2").ends_with("allowed"), "{}", out.stdout);
    assert!(out.stderr.contains("fork(s) of the job refused on this host: process limit reached"), "{}", out.stderr);
    // Nothing reached the stranger's port; job A is unharmed and ends as it should.
    stranger.set_nonblocking(true).unwrap();
    assert!(stranger.accept().is_err(), "a refused connection got through");
    assert!(!std::path::Path::new(&dir).join("planted").exists());
    assert!(a.try_wait().unwrap().is_none(), "job A ended early");
    std::fs::write(std::path::Path::new(&dir).join("go"), "").unwrap();
    let l = wait_line(&mut out_a, "rank 1 wait-file:go:");
    assert!(l.ends_with("allowed"), "{l}");
    assert!(a.wait().unwrap().success());
    // And the daemon runs the next job.
    let pi = example("pi");
    let out = g.run(&["-n", "2", pi.to_str().unwrap()]);
    out.assert_ok();
}

/// `p2pmpirun --local`: the submitter's own processes are not confined unless asked; with
/// `--confine` they are, as a peer confines a grid job (their current directory is the job's
/// directory), over shared memory and over TCP, and the job still computes. Nothing of the
/// job's temporary or segment directories is left behind.
#[test]
fn a_local_job_is_confined_only_with_confine() {
    if !landlock() {
        return;
    }
    let base = std::env::temp_dir().join(format!("p2pmpi-local-confine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (work, home) = (base.join("work"), base.join("home"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let secret = base.join("secret");
    std::fs::write(&secret, "the submitter's\n").unwrap();
    // A TCP service of this host outside the grid's ports (MIN_PORT..MAX_PORT: 9801..9900).
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = service.local_addr().unwrap().port();
    assert!(!(9801..=9900).contains(&port));
    let mut probes = vec![
        format!("read:{}", secret.display()),
        format!("write:{}", base.join("planted").display()),
        "environ:parent".to_string(),
    ];
    if p2pmpi_peer::confine::kernel_abi() >= 4 {
        // Landlock restricts TCP from ABI 4.
        probes.push(format!("connect:127.0.0.1:{port}"));
    }
    let denied = probes.len();
    probes.extend(["write-own".to_string(), "own-status".to_string()]);
    let leftovers = || -> Vec<String> {
        let mut v = Vec::new();
        for d in [std::env::temp_dir(), "/dev/shm".into()] {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with("p2pmpi-local-") && !n.starts_with("p2pmpi-local-confine-") {
                    v.push(n);
                }
            }
        }
        v
    };
    let before = leftovers();
    let prog = example("probe_escape");
    for (confine, shm) in [(false, "1"), (true, "1"), (true, "0")] {
        let mut cmd = std::process::Command::new(common::grid::bin("p2pmpirun"));
        cmd.args(["--local", "-n", "2"]);
        if confine {
            cmd.arg("--confine");
        }
        cmd.arg(&prog)
            .args(&probes)
            .current_dir(&work)
            .env("P2PMPI_HOME", &home)
            .env_remove("P2PMPI_CONF_FILE")
            .env("P2PMPI_SHM", shm);
        let out = common::run_cmd(&mut cmd, common::grid::LIMIT);
        out.assert_ok();
        let text = format!("--confine {confine}, P2PMPI_SHM={shm}:\n{}{}", out.stdout, out.stderr);
        for p in &probes[..denied] {
            let l = line(&out.stdout, p);
            assert_eq!(l.contains("denied"), confine, "{l}\n{text}");
        }
        for p in &probes[denied..] {
            assert!(line(&out.stdout, p).ends_with("allowed"), "{text}");
        }
        assert_eq!(base.join("planted").exists(), !confine, "{text}");
        let _ = std::fs::remove_file(base.join("planted"));
        assert_eq!(std::fs::read_to_string(work.join("own-file.txt")).unwrap(), "mine\n");
    }
    // Those of other tests running now aside.
    let after: Vec<String> = leftovers().into_iter().filter(|n| !before.contains(n)).collect();
    assert!(after.is_empty(), "left behind: {after:?}");
    drop(service);
    std::fs::remove_dir_all(&base).unwrap();
}

/// `p2pmpirun --local --confine`: a job that spawns children (started confined too, allowed
/// to reach their own job's control port) runs to its end, both ways across the
/// intercommunicator and merged.
#[test]
fn a_local_confined_job_spawns_and_talks_with_its_children() {
    if !landlock() {
        return;
    }
    let prog = example("spawn_checks");
    let mut cmd = std::process::Command::new(common::grid::bin("p2pmpirun"));
    cmd.args(["--local", "--confine", "-n", "2"])
        .arg(&prog)
        .arg("basic")
        .current_dir(std::env::temp_dir())
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-confined-spawn")
        .env_remove("P2PMPI_CONF_FILE");
    let out = common::run_cmd(&mut cmd, common::grid::LIMIT);
    out.assert_ok();
    for r in 0..2 {
        let child = format!("child {r} of 2: 2 parents, merged rank {} of 4, sum 6", 2 + r);
        assert!(out.stdout.contains(&child), "missing {child:?} in:\n{}{}", out.stdout, out.stderr);
    }
}
