//! The README's member-key flow across two machines (issue 38), in network namespaces m1 and
//! m2: `p2pmpi init`, `p2pmpi grid create` on the owner m1, `p2pmpi grid invite m2` there and
//! `p2pmpi grid join CODE` on m2, the supernode and both MPDs in member mode, then a job
//! submitted from m2 whose rank on m1 runs confined: it computes with its rank on m2 (the
//! job's own traffic flows between the hosts), while its TCP connection to a port of no job on
//! m2 is refused by Landlock's network rule. Needs root, `ip`, `nft` and Landlock ABI 4
//! (skipped otherwise, failing under CI).

mod common;

use common::netns::{available, Daemons, Netns, Site};
use std::io::BufRead;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn members_invited_and_joined_across_two_machines_run_a_confined_job() {
    if !available() {
        return;
    }
    if !common::require(
        (p2pmpi_peer::confine::kernel_abi() < 4).then(|| "needs Landlock ABI 4 (TCP rules)".to_string()),
    ) {
        return;
    }
    let net = Netns::new("members", &[Site::open(&["m1", "m2"])]);
    let dir = std::env::temp_dir().join(format!("{}homes", net.prefix));
    let _ = std::fs::remove_dir_all(&dir);
    let home = |h: &str| dir.join(h);
    let _guard = Daemons(vec![home("m1"), home("m2")]);
    let cmd = |h: &str, cmd: &str, args: &[&str]| {
        let mut c = net.exec(h, common::grid::bin(cmd));
        c.args(args).env("P2PMPI_HOME", home(h)).env_remove("P2PMPI_CONF_FILE");
        c
    };
    let on = |h: &str, name: &str, args: &[&str]| common::run_cmd(&mut cmd(h, name, args), Duration::from_secs(90));
    let sn = format!("{}:9700", net.addr("m1"));

    // The README's commands, in its order.
    on("m1", "p2pmpi", &["init", "--supernode", &sn]).assert_ok();
    let created = on("m1", "p2pmpi", &["grid", "create", "m1"]);
    created.assert_ok();
    assert!(created.stdout.contains("created the grid"), "{}", created.stdout);
    let mut inviter = cmd("m1", "p2pmpi", &["grid", "invite", "m2", "--roles", "host,submit", "--wait", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(inviter.stdout.take().unwrap()).lines();
    let code = loop {
        let Some(line) = lines.next() else {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut inviter.stderr.take().unwrap(), &mut err);
            panic!("invite ended before printing its code: {err}");
        };
        let line = line.unwrap();
        if let Some(rest) = line.split("grid join ").nth(1) {
            break rest.trim().to_string();
        }
    };
    drop(inviter.stderr.take());
    assert!(code.starts_with(&format!("p2pmpi1/{}:", net.addr("m1"))), "{code}");
    std::thread::spawn(move || lines.for_each(drop));
    on("m2", "p2pmpi", &["init", "--supernode", &sn]).assert_ok();
    let joined = on("m2", "p2pmpi", &["grid", "join", &code]);
    joined.assert_ok();
    assert!(joined.stdout.contains("as \"m2\" with roles host,submit"), "{}", joined.stdout);
    let st = common::wait_bounded(&mut inviter, Duration::from_secs(30)).expect("the inviter ends after the join");
    assert!(st.success());

    on("m1", "runSupernode", &[]).assert_ok();
    on("m1", "mpiboot", &[]).assert_ok();
    on("m2", "mpiboot", &[]).assert_ok();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let hosts = on("m2", "mpihost", &[]);
        if hosts.stdout.lines().any(|l| l.starts_with(&net.addr("m1").to_string()) && l.contains(" true ")) {
            break;
        }
        assert!(Instant::now() < deadline, "m2 never listed m1 alive:\n{}", hosts.stdout);
        std::thread::sleep(Duration::from_millis(300));
    }

    // A service on m2 outside the grid's ports (9801..9900): a port of no job.
    let service = net.listen("m2", 7001);
    let to = format!("connect:{}:7001", net.addr("m2"));
    // The same connection from m1 unconfined gets through: the network allows it.
    let plain = net.connect("m1", service.local_addr().unwrap(), Duration::from_secs(5));
    assert!(plain.is_ok(), "{plain:?}");
    let prog = common::example("probe_escape");
    let run = on("m2", "p2pmpirun", &["-n", "2", prog.to_str().unwrap(), &to, "write-own"]);
    run.assert_ok();
    let line = |p: &str| {
        run.stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank 1 {p}:")))
            .unwrap_or_else(|| panic!("no {p}:\n{}\n{}", run.stdout, run.stderr))
            .to_string()
    };
    // Rank 1 ran on m1 (rank 0 is the submitter's, on m2), confined: refused there, while the
    // job itself (its ranks' connection across the hosts, the barrier) went through.
    assert!(line(&to).contains("denied (Permission denied"), "{}", run.stdout);
    assert!(line("write-own").ends_with("allowed"), "{}", run.stdout);
    drop(service);

    on("m2", "mpihalt", &[]).assert_ok();
    on("m1", "mpihalt", &[]).assert_ok();
    on("m1", "stopSupernode", &[]).assert_ok();
    let _ = std::fs::remove_dir_all(&dir);
}
