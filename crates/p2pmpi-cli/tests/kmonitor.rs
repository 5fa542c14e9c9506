//! The k-monitor failure detector (`--fd kmonitor`) in running jobs: real processes killed
//! (`kill -9`: their connections are reset) or frozen (`SIGSTOP`: silence), jobs that end
//! normally (their processes leave, nobody is reported failed), replicated jobs, the
//! configuration file, and bad options.
#![forbid(unsafe_code)]

mod common;

use common::grid::TestGrid;
use common::job::Job;
use common::{example, launcher, run_cmd};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// T_hb and T_to of the fast tests, ms.
const T_HB: u64 = 50;
const T_TO: u64 = 500;
/// Slack for a loaded 2-core machine (the suite runs tests in parallel): a notice is printed
/// by the program's handler and read by the test through pipes.
const SLACK_MS: u128 = 700;
const LIMIT: Duration = Duration::from_secs(90);

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

fn km_args() -> Vec<String> {
    ["--fd", "kmonitor", "--t-hb", &T_HB.to_string(), "--t-to", &T_TO.to_string()].map(String::from).to_vec()
}

fn local_job(n: usize, extra: &[&str], prog: &str, prog_args: &[&str]) -> Job {
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", &n.to_string(), "--local"]).args(km_args()).args(extra).arg(example(prog)).args(prog_args);
    cmd.env("P2PMPI_HOME", "/nonexistent").env_remove("P2PMPI_CONF_FILE");
    Job::spawn(&mut cmd)
}

/// rank → when it was notified of `victim`'s failure (unix ms), from `fdwatch --notify`.
fn notices_of(job: &Job, victim: usize) -> Vec<(usize, u128)> {
    let pat = format!("notified: rank {victim} failed at ");
    job.lines()
        .iter()
        .filter_map(|l| {
            let rest = l.text.strip_prefix("rank ")?;
            let rank = rest.split_whitespace().next()?.parse().ok()?;
            let at = l.text.split(&pat).nth(1)?.trim().parse().ok()?;
            Some((rank, at))
        })
        .collect()
}

/// Every rank but `victim` is notified of its failure within `bound` ms of `at`, and of
/// nothing else; returns the delays.
fn assert_all_notified(job: &Job, n: usize, victim: usize, at: u128, bound: u128) -> Vec<u128> {
    let got = job.wait_for(Duration::from_secs(20), "every notice", |_| {
        let got = notices_of(job, victim);
        (got.len() >= n - 1).then_some(got)
    });
    let mut times = Vec::new();
    for r in (0..n).filter(|&r| r != victim) {
        let (_, t) = got.iter().find(|(rank, _)| *rank == r).unwrap_or_else(|| panic!("rank {r} not notified"));
        let dt = t.saturating_sub(at);
        assert!(
            dt <= bound + SLACK_MS,
            "rank {r} notified {dt} ms after the failure (bound {bound} ms):\n{}",
            job.text()
        );
        times.push(dt);
    }
    let text = job.text();
    assert!(
        !text.lines().any(|l| l.contains("notified: rank") && !l.contains(&format!("notified: rank {victim} "))),
        "a false detection:\n{text}"
    );
    eprintln!("k-monitor: rank {victim}'s failure notified after {times:?} ms (bound {bound} ms)");
    times
}

/// Sends `sig` to `pid` past the job's start-up, checked (killed: dead; frozen: stopped).
/// The wait is the scenario (4 heartbeat periods past the ready lines: every process has its
/// monitors; no line tells when they connected), not a barrier.
fn signal(pid: u32, sig: i32) -> u128 {
    std::thread::sleep(Duration::from_millis(4 * T_HB));
    let at = unix_ms();
    common::inject(pid, sig);
    at
}

/// Waits until a process of the job carrying `marker` runs slot `slot` (its `P2PMPI_RANK`);
/// returns its pid.
fn slot_pid(job: &Job, marker: &str, slot: &str) -> u32 {
    let mut pid = None;
    common::wait_until(LIMIT, &format!("slot {slot} started; output:\n{}", job.text()), || {
        pid = common::processes_with(marker)
            .into_iter()
            .find(|&pid| common::env_of(pid, "P2PMPI_RANK").as_deref() == Some(slot));
        pid.is_some()
    });
    pid.unwrap()
}

/// Waits until `replcheck iterate` printed its first sum (`step 9:`): every rank has started
/// and passed the first allreduce.
fn wait_first_sum(job: &Job) {
    job.wait_for(LIMIT, "the first allreduce (step 9)", |l| {
        l.iter().any(|l| l.text.starts_with("step 9:")).then_some(())
    });
}

#[test]
fn kill_9_is_known_everywhere_at_once_through_the_reset_connections() {
    let n = 12;
    let job = local_job(n, &[], "fdwatch", &["--notify", "--hold", "4000"]);
    let ready = job.ready(n, LIMIT);
    let at = signal(ready[7].0, libc::SIGKILL);
    // The seed's claim: a crash is seen at once (a reset), not after T_to.
    let times = assert_all_notified(&job, n, 7, at, 100);
    assert!(times.iter().any(|&t| t < T_TO as u128), "no notice before T_to: not through the reset? {times:?}");
    let (code, text) = job.finish(LIMIT);
    assert_eq!(code, 0, "{text}");
    // The launcher names the first report it got: a monitor's own, or a notice it relayed.
    assert!(
        text.contains("rank 7 failed: its k-monitor connection was reset")
            || text.contains("rank 7 failed: rank ") && text.contains("reported it failed (k-monitor notice)"),
        "{text}"
    );
    assert!(text.contains("(kmonitor)"), "the job did not run the k-monitor detector:\n{text}");
}

#[test]
fn sigstop_is_known_everywhere_within_t_to() {
    let n = 8;
    let job = local_job(n, &[], "fdwatch", &["--notify", "--hold", "4000"]);
    let ready = job.ready(n, LIMIT);
    let at = signal(ready[2].0, libc::SIGSTOP);
    let times = assert_all_notified(&job, n, 2, at, T_TO as u128 + 50);
    // Silence, not a reset: nobody can know before T_to minus one heartbeat period.
    assert!(times.iter().all(|&t| t + T_HB as u128 >= T_TO as u128), "{times:?}");
    let (code, text) = job.finish(LIMIT);
    assert_eq!(code, 0, "{text}");
    // The launcher names the first report it got: the monitor's own, or a notice it relayed.
    assert!(
        text.contains("rank 2 failed: no heartbeat for 0.5 s (k-monitor T_to)")
            || text.contains("rank 2 failed: rank ") && text.contains("reported it failed (k-monitor notice)"),
        "{text}"
    );
}

/// `--confirm`: a monitor whose time-out expires asks a co-monitor first. A frozen process is
/// still known everywhere, at the cost of one round trip to the co-monitor; and the processes
/// that end after it (policy Notify: no goodbye handshake) leave without being reported.
#[test]
fn with_confirmation_sigstop_is_known_everywhere_and_the_ends_are_clean() {
    let n = 8;
    let job = local_job(n, &["--confirm"], "fdwatch", &["--notify", "--hold", "3000"]);
    let ready = job.ready(n, LIMIT);
    let at = signal(ready[3].0, libc::SIGSTOP);
    let times = assert_all_notified(&job, n, 3, at, T_TO as u128 + 50);
    assert!(times.iter().all(|&t| t + T_HB as u128 >= T_TO as u128), "{times:?}");
    let (code, text) = job.finish(LIMIT);
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("exits (failed: [3])")).count(), n - 1, "{text}");
}

/// A process frozen past `T_to` (0.9 s) and resumed: the others declare it failed; when it runs
/// again it reads that it was declared failed before it judges anyone, so it accuses nobody
/// (it used to report every process it monitors, and the launcher printed those reports).
#[test]
fn a_process_frozen_then_resumed_accuses_nobody() {
    let n = 12;
    let job = local_job(n, &[], "fdwatch", &["--notify", "--hold", "4000"]);
    let ready = job.ready(n, LIMIT);
    let pid = ready[5].0;
    let at = signal(pid, libc::SIGSTOP);
    assert_all_notified(&job, n, 5, at, T_TO as u128 + 50);
    // The scenario: frozen a while more past its declaration, then resumed.
    std::thread::sleep(Duration::from_millis(400));
    common::thaw(pid);
    // The resumed rank, declared failed, finds at its end that the others finished without
    // it: that is not a new failure of a job whose program handles failures.
    let (code, text) = job.finish(LIMIT);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("(detected by rank 5)"), "the resumed process accused others:\n{text}");
    assert!(!text.lines().any(|l| l.starts_with("rank 5 notified")), "the resumed process accused others:\n{text}");
    assert_eq!(text.lines().filter(|l| l.contains("exits (failed: [5])")).count(), n - 1, "{text}");
}

/// A false detection in a program that handles failures (`--notify`): the process declared
/// failed runs on, abandoned by the others, and stops on an error of its own at its end (its
/// peers finalized without it). The job still succeeds; the launcher says why that process
/// stopped. (It used to stop the job with exit status 1, seen in the soak under load.)
#[test]
fn a_process_declared_failed_that_runs_on_does_not_fail_a_tolerant_job() {
    let n = 8;
    let job = local_job(n, &[], "fdwatch", &["--notify", "--hold", "6000"]);
    let ready = job.ready(n, LIMIT);
    let pid = ready[5].0;
    let at = signal(pid, libc::SIGSTOP);
    assert_all_notified(&job, n, 5, at, T_TO as u128 + 50);
    common::thaw(pid);
    let (code, text) = job.finish(LIMIT);
    assert_eq!(code, 0, "{text}");
    // Rank 5 stops on an error when its peers closed their connections before it finalized
    // (the usual order; it may also finalize first and exit 0): the launcher says so.
    if text.contains("p2pmpi: rank 5: ") {
        assert!(text.contains("rank 5, reported failed earlier, stopped: "), "{text}");
    }
    assert!(!text.contains("stopping the other processes"), "{text}");
}

#[test]
fn without_replication_a_killed_process_stops_the_job_naming_the_rank() {
    let job = local_job(6, &[], "fdwatch", &["--hold", "3000"]);
    let ready = job.ready(6, LIMIT);
    signal(ready[4].0, libc::SIGKILL);
    let (code, text) = job.finish(LIMIT);
    // The job's status is that of the first failure the launcher hears of: the others
    // stopping on the detector's notice (1), or rank 4's own end (128 + SIGKILL) when its exit
    // is reaped first — a race between the detector and waitpid, both naming rank 4.
    assert!(code == 1 || code == 128 + libc::SIGKILL, "{code}: {text}");
    assert!(text.contains("rank 4"), "{text}");
    assert!(text.contains("stopping the other processes"), "{text}");
}

/// Processes that finish leave: whatever order they end in, nobody is reported failed (the
/// connections they close at exit are not resets of live processes).
#[test]
fn jobs_that_end_normally_report_no_failure() {
    for round in 0..3 {
        let job = local_job(8, &[], "fdwatch", &["--hold", &format!("{}", 300 + 200 * round)]);
        let (code, text) = job.finish(LIMIT);
        assert_eq!(code, 0, "round {round}:\n{text}");
        assert!(!text.contains("failed"), "round {round}: a false detection:\n{text}");
        assert_eq!(text.lines().filter(|l| l.contains(" done ")).count(), 8, "{text}");
    }
}

/// With `--confirm`, a process whose monitor leaves tells its other monitors (`MonitorSet`)
/// just as they leave too: a write that meets a peer's reset must read the `Leave` waiting in
/// the socket before it reports the link broken (it reported every such peer failed).
#[test]
fn jobs_that_end_normally_report_no_failure_with_confirmation() {
    for round in 0..3 {
        let job = local_job(12, &["--confirm"], "fdwatch", &["--notify", "--hold", &format!("{}", 1000 + 300 * round)]);
        let (code, text) = job.finish(LIMIT);
        assert_eq!(code, 0, "round {round}:\n{text}");
        assert!(!text.contains("notified"), "round {round}: a false detection:\n{text}");
        assert_eq!(text.lines().filter(|l| l.contains("exits (failed: [])")).count(), 12, "round {round}:\n{text}");
    }
}

/// `-r 2`: a replica killed mid-run is reported through the k-monitor detector, fenced by the
/// launcher, and the job ends with the fault-free result.
#[test]
fn replicated_job_survives_a_killed_replica() {
    let clean = local_job(3, &["-r", "2"], "replcheck", &["iterate", "60", "20"]);
    let e = clean.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    let want = e.stdout;
    assert!(!want.is_empty(), "{}", e.text);
    let marker = common::marker("km-repl");
    let job = local_job(3, &["-r", "2"], "replcheck", &["iterate", "60", "20", &marker]);
    // Slot 3 is rank 1's second replica (slots are rank-major: rank r replica i = r·R + i).
    let pid = slot_pid(&job, &marker, "3");
    wait_first_sum(&job);
    common::kill9(pid);
    let e = job.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(e.stdout, want, "{}", e.text);
    // Reported by the k-monitor detector, or first by a data connection that closed.
    assert!(e.text.contains("rank 1 replica 1 failed"), "{}", e.text);
    assert!(e.text.contains("rank 1 goes on with 1 replica(s)"), "{}", e.text);
}

/// `-r 2`: a replica frozen past detection and then resumed (issue 12's principal case) is
/// declared dead by the launcher on the k-monitor detector's word, is stopped when it resumes,
/// and the job ends with the fault-free result.
#[test]
fn replicated_job_survives_a_replica_frozen_then_resumed() {
    let args = ["iterate", "200", "30"];
    let clean = local_job(3, &["-r", "2"], "replcheck", &args);
    let e = clean.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    let want = e.stdout;
    let marker = common::marker("km-freeze");
    let job = local_job(3, &["-r", "2"], "replcheck", &[args[0], args[1], args[2], &marker]);
    // Slot 5: rank 2's second replica.
    let pid = slot_pid(&job, &marker, "5");
    wait_first_sum(&job);
    common::freeze(pid);
    job.wait_for(LIMIT, "the frozen replica declared dead", |l| {
        l.iter().any(|l| l.text.contains("rank 2 replica 1 failed")).then_some(())
    });
    // The scenario: frozen past its lease (1 s from its last renewal: the launcher then
    // declares it dead), then resumed.
    std::thread::sleep(Duration::from_millis(2000));
    common::thaw(pid);
    let e = job.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(e.stdout, want, "{}", e.text);
    assert!(e.text.contains("rank 2 replica 1 was declared dead at"), "{}", e.text);
    assert!(e.text.contains("it resumed and was stopped"), "{}", e.text);
}

/// `GOSSIP_PROTOCOL=KMONITOR` in the configuration picks the detector for every job, with
/// `K_MONITORS`, `T_HB` and `T_TO`.
#[test]
fn the_configuration_file_selects_the_k_monitor_detector() {
    let dir = std::env::temp_dir().join(format!("p2pmpi-kmconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("P2P-MPI.conf");
    std::fs::write(&conf, "GOSSIP_PROTOCOL=KMONITOR\nK_MONITORS=2\nT_HB=40\nT_TO=400\n").unwrap();
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", "4", "--local"]).arg(example("fdwatch")).args(["--notify", "--hold", "2500"]);
    cmd.env("P2PMPI_HOME", &dir).env("P2PMPI_CONF_FILE", &conf);
    let job = Job::spawn(&mut cmd);
    let ready = job.ready(4, LIMIT);
    let at = signal(ready[1].0, libc::SIGSTOP);
    let times = assert_all_notified(&job, 4, 1, at, 450);
    // T_TO = 400 (not the default 1000): silence of T_to less at most one T_hb.
    assert!(times.iter().all(|&t| t + 40 >= 400 && t < 900), "{times:?}");
    let (code, text) = job.finish(LIMIT);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("rank 1 failed: ") && text.contains("(k-monitor"), "{text}");
    assert!(text.contains("(kmonitor)"), "{text}");
}

#[test]
fn bad_k_monitor_options_are_refused_with_a_clear_error() {
    let fdwatch = example("fdwatch");
    let fdwatch = fdwatch.to_str().unwrap();
    for (args, want) in [
        (vec!["--k", "3"], "add --fd kmonitor"),
        (vec!["--fd", "kmonitor", "--t-hb", "200", "--t-to", "100"], "must be longer than --t-hb"),
        (vec!["--fd", "kmonitor", "--k", "0"], "--k must be at least 1"),
        (vec!["--t-to-wide", "3000"], "add --fd kmonitor"),
        (
            vec!["--fd", "kmonitor", "--t-hb-wide", "1000"],
            "--t-to-wide (1000 ms) must be longer than --t-hb-wide (1000 ms)",
        ),
        (vec!["--fd", "kmonitor", "--t-hb-wide", "0"], "--t-hb-wide must be at least 1 ms"),
        (vec!["--fd", "kmonitor", "--wide-refusals", "0"], "--wide-refusals must be at least 1"),
        (vec!["--fd", "gossip"], "KMONITOR or off"),
    ] {
        let o = run_cmd(
            Command::new(launcher())
                .args(["-n", "2", "--local"])
                .args(&args)
                .arg(fdwatch)
                .env("P2PMPI_HOME", "/nonexistent")
                .env_remove("P2PMPI_CONF_FILE"),
            Duration::from_secs(30),
        );
        assert_eq!(o.code(), Some(2), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{args:?}: {}", o.stderr);
    }
}

#[test]
fn wide_area_settings_are_taken_from_options_and_configuration() {
    let fdwatch = example("fdwatch");
    let dir = std::env::temp_dir().join(format!("p2pmpi-kmwide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("P2P-MPI.conf"), "GOSSIP_PROTOCOL=KMONITOR\nT_HB_WIDE=200\nT_TO_WIDE=2500\n").unwrap();
    for (args, want) in
        [(vec![], "T'_hb = 200ms, T'_to = 2.5s"), (vec!["--t-to-wide", "4000"], "T'_hb = 200ms, T'_to = 4s")]
    {
        let o = run_cmd(
            Command::new(launcher())
                .args(["-n", "2", "--local", "-v"])
                .args(&args)
                .arg(&fdwatch)
                .env("P2PMPI_HOME", &dir)
                .env_remove("P2PMPI_CONF_FILE"),
            Duration::from_secs(30),
        );
        assert_eq!(o.code(), Some(0), "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!(
                "failure detector: k-monitor (k = 4, T_hb = 100ms, T_to = 1s; between subnets {want})"
            )),
            "{args:?}: {}",
            o.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a local grid (a supernode and 4 peer daemons on 127.0.0.2 …): the job's processes on
/// four hosts, a `kill -9` known everywhere at once, a `SIGSTOP` within T_to.
#[test]
fn on_a_local_grid_kill_9_and_sigstop_are_known_everywhere() {
    let g = TestGrid::start("km", 4, &["--procs", "3", "--net", "127.0.43"]);
    g.wait_hosts(1, 3);
    let n = 12;
    for (sig, victim, bound) in [(libc::SIGKILL, 7usize, 100u128), (libc::SIGSTOP, 10, T_TO as u128 + 50)] {
        let mut cmd = Command::new(launcher());
        cmd.args(["-n", &n.to_string()]).args(km_args()).arg(example("fdwatch")).args(["--notify", "--hold", "5000"]);
        cmd.env("P2PMPI_HOME", g.home(1)).env_remove("P2PMPI_CONF_FILE");
        let job = Job::spawn(&mut cmd);
        let ready = job.ready(n, LIMIT);
        let hosts: std::collections::BTreeSet<&String> = ready.iter().map(|(_, h)| h).collect();
        assert!(hosts.len() >= 4, "processes on every peer: {ready:?}");
        let at = signal(ready[victim].0, sig);
        assert_all_notified(&job, n, victim, at, bound);
        let (code, text) = job.finish(LIMIT);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("(kmonitor)"), "the job did not run the k-monitor detector:\n{text}");
    }
}
