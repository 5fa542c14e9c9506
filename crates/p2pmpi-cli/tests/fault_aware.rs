//! Fault-aware programs (`mpi::ulfm`: agree, shrink, failure acknowledgement) on real
//! processes: `examples/ft_solver` loses a rank to `kill -9`, shrinks its communicator,
//! redistributes the lost work and prints the right answer.
#![forbid(unsafe_code)]

mod common;
use common::job::Job;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn solver(n: usize, args: &[&str]) -> Command {
    let mut c = Command::new(launcher());
    let n = n.to_string();
    c.args(["-n", &n, "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_solver"))
        .args(args)
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    c
}

/// The answer line: (ranks at the end, verdict).
fn answer(out: &str) -> Option<(String, String)> {
    let l = out.lines().find(|l| l.starts_with("total "))?;
    let w: Vec<&str> = l.split_whitespace().collect();
    Some((w[6].to_string(), w.last()?.to_string()))
}

#[test]
fn without_failures_the_solver_agrees_every_round_and_is_right() {
    let o = run_cmd(&mut solver(3, &["6000", "1000"]), T);
    o.assert_ok();
    assert_eq!(o.stdout.matches(" done on 3 ranks").count(), 6, "{}", o.stdout);
    assert_eq!(answer(&o.stdout), Some(("3".into(), "correct".into())), "{}", o.stdout);
}

#[test]
fn a_rank_killed_mid_run_is_shrunk_away_and_the_answer_is_still_right() {
    let job = Job::spawn(&mut solver(4, &["20000", "1000", "150"]));
    let ready = job.ready(4, T);
    job.wait_for(T, "round 3", |lines| lines.iter().any(|l| l.text == "round 3 done on 4 ranks").then_some(()));
    let victim = ready[2].0;
    assert!(Command::new("kill").args(["-9", &victim.to_string()]).status().unwrap().success());
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("rank 2 (pid") && text.contains("the program handles failures, the job goes on"), "{text}");
    assert!(text.contains(" done on 3 ranks"), "the rounds after the failure ran on the survivors: {text}");
    assert_eq!(answer(&text), Some(("3".into(), "correct".into())), "{text}");
}

#[test]
fn alone_without_a_launcher_agreement_is_immediate() {
    let o = run_cmd(Command::new(example("ft_solver")).args(["3000", "500"]), T);
    o.assert_ok();
    assert_eq!(answer(&o.stdout), Some(("1".into(), "correct".into())), "{}", o.stdout);
}

#[test]
fn a_receive_from_any_source_fails_when_a_worker_dies_and_works_again_once_acknowledged() {
    collect_through_a_worker_death("receive");
}

#[test]
fn blocking_probes_from_any_source_fail_when_a_worker_dies_and_work_again_once_acknowledged() {
    collect_through_a_worker_death("probe");
    // A receive of a vector probes for the message's size first.
    collect_through_a_worker_death("vec");
}

#[test]
fn waiting_for_any_of_several_requests_fails_the_receive_from_any_source_when_a_worker_dies() {
    collect_through_a_worker_death("waitany");
}

fn collect_through_a_worker_death(mode: &str) {
    let mut c = Command::new(launcher());
    c.args(["-n", "4", "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_collect"))
        .args(["12", "150", mode])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = Job::spawn(&mut c);
    let ready = job.ready(4, T);
    job.wait_for(T, "round 2", |lines| lines.iter().any(|l| l.text == "round 2 complete").then_some(()));
    let victim = ready[2].0;
    assert!(Command::new("kill").args(["-9", &victim.to_string()]).status().unwrap().success());
    // Without the failure's notice reaching the pending receive, rank 0 would wait forever
    // for rank 2's message of the round: the job would not end.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("{mode} from any source failed: ")) && text.contains("lost rank 2"), "{text}");
    assert!(text.contains("round 11 complete"), "{text}");
    assert!(text.contains("from 2 of 3 workers: correct"), "{text}");
}

#[test]
fn collectives_return_their_errors_and_a_revoke_frees_ranks_that_never_talk_to_the_dead_one() {
    let mut c = Command::new(launcher());
    c.args(["-n", "4", "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_revoke"))
        .args(["20", "1000", "150"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = Job::spawn(&mut c);
    let ready = job.ready(4, T);
    job.wait_for(T, "round 3", |lines| lines.iter().any(|l| l.text == "round 3 done on 4 ranks").then_some(()));
    let victim = ready[2].0;
    assert!(Command::new("kill").args(["-9", &victim.to_string()]).status().unwrap().success());
    // Without the revocation, a rank whose allreduce partner gave up would wait for it
    // forever: the job would not end.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains(": round ") && l.contains(" failed: ")).collect();
    assert_eq!(failed.len(), 3, "every survivor saw the round fail: {text}");
    assert!(
        failed.iter().any(|l| l.contains("the communicator was revoked")),
        "a survivor learned it through the revocation: {text}"
    );
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("total 00000002534e5ed3 over 20 rounds on 3 of 4 ranks: correct"), "{text}");
}
