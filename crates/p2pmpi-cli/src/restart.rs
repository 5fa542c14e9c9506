//! A local job restarted from its checkpoints (issue 41): where its checkpoints are kept
//! (`--checkpoint-dir`, else a directory of its own under `./p2pmpi-checkpoints`), what a run
//! of its processes is told ([`Run::env`]), when a failed run is started again
//! (`--max-restarts`: a process killed by a signal), and what the launcher says then.
//!
//! The pieces and manifests are the library's (`p2pmpi::checkpoint::store`); the launcher
//! reads only which generation is the last complete one. The output of the runs is joined by
//! [`crate::output::Replay`].
//!
//! `--resume DIR` restarts a job whose launcher itself died: a launcher that keeps
//! checkpoints (`--checkpoint-dir` or `--max-restarts`) writes in their directory, at its
//! start, the job's record ([`JobRecord`], atomically), keeps the output's replay there as it
//! goes ([`crate::output::Journal`]) and holds a lock file with its pid while it runs.

use crate::options::RunArgs;
use crate::output::Replay;
use anyhow::{bail, Context, Result};
use p2pmpi::checkpoint::store::{Directory, Manifest, Store};
use std::path::{Path, PathBuf};

/// The checkpoint directory of a local job.
pub struct LocalCheckpoints {
    dir: PathBuf,
    /// Chosen by the launcher (removed when the job succeeds), not by the user.
    own: bool,
}

impl LocalCheckpoints {
    /// The job's directory: `--checkpoint-dir` (its earlier generations deleted: this is a
    /// fresh start), else `./p2pmpi-checkpoints/PROGRAM-PID` (created when the program first
    /// checkpoints).
    pub fn new(opts: &RunArgs, program: &Path) -> Result<LocalCheckpoints> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        if let Some(d) = &opts.resume {
            return Ok(LocalCheckpoints { dir: cwd.join(d), own: false });
        }
        if let Some(d) = &opts.checkpoint_dir {
            let dir = cwd.join(d);
            Directory::new(&dir)
                .clear()
                .with_context(|| format!("--checkpoint-dir {}: cannot delete earlier checkpoints", dir.display()))?;
            return Ok(LocalCheckpoints { dir, own: false });
        }
        let stem = program.file_name().map_or("job".into(), |s| s.to_string_lossy().into_owned());
        let dir = cwd.join("p2pmpi-checkpoints").join(format!("{stem}-{}", std::process::id()));
        Ok(LocalCheckpoints { dir, own: true })
    }

    /// Whether the job keeps a record for `--resume` (its checkpoints asked for).
    pub fn recorded(opts: &RunArgs) -> bool {
        opts.checkpoint_dir.is_some() || opts.max_restarts > 0 || opts.resume.is_some()
    }

    /// Holds the directory for this launcher: a lock file with its pid, removed when dropped.
    /// A directory held by a launcher still running is refused.
    pub fn lock(&self) -> Result<Lock> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        let path = self.dir.join(LOCK);
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    use std::io::Write;
                    f.write_all(format!("{}\n", std::process::id()).as_bytes())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    return Ok(Lock(path));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let pid = std::fs::read_to_string(&path).ok().and_then(|t| t.trim().parse::<u32>().ok());
                    if let Some(pid) = pid.filter(|&p| launcher_alive(p)) {
                        bail!(
                            "{} is in use by a launcher still running (pid {pid}, its lock {}): wait for it to end or \
                             stop it first",
                            self.dir.display(),
                            path.display()
                        );
                    }
                    // Left by a launcher that died.
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
            }
        }
        bail!("cannot take the lock {}", path.display())
    }

    /// Writes the job's record (atomically): what `--resume` needs to start it again.
    pub fn record(&self, opts: &RunArgs, program: &Path) -> Result<()> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let mut opts = opts.clone();
        let program = cwd.join(program);
        opts.command[0] = program.display().to_string();
        // `-x VAR` takes its value here and now.
        opts.env = crate::options::extra_env(&opts)?.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        opts.checkpoint_dir = Some(self.dir.clone());
        let hash = p2pmpi::checkpoint::program_hash_of(&program)
            .with_context(|| format!("cannot read the program {}", program.display()))?;
        let rec = JobRecord { cwd, program_hash: hex(&hash), opts };
        let text = serde_json::to_vec_pretty(&rec).context("cannot write the job's record")?;
        let path = self.dir.join(RECORD);
        let tmp = self.dir.join(format!("{RECORD}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write the job's record {}", path.display()))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last complete generation, if any.
    pub fn latest(&self) -> Result<Option<Manifest>> {
        Directory::new(&self.dir)
            .latest()
            .with_context(|| format!("cannot read the checkpoints in {}", self.dir.display()))
    }

    /// The job ended with `code`: a directory of the launcher's own is removed when the job
    /// succeeded, and named when it failed with checkpoints in it (`grid`: a grid job's).
    pub fn finish(&self, name: &str, code: i32, grid: bool) {
        if !self.dir.exists() {
            return;
        }
        if code == 0 && self.own {
            let _ = std::fs::remove_dir_all(&self.dir);
            if let Some(parent) = self.dir.parent() {
                // Only if empty (another job may keep its checkpoints there).
                let _ = std::fs::remove_dir(parent);
            }
        } else if code != 0 && matches!(self.latest(), Ok(Some(_))) {
            let local = if grid { "" } else { "--local " };
            eprintln!(
                "{name}: the job's checkpoints are kept in {} (p2pmpirun {local}--resume {0} restarts it from the \
                 last)",
                self.dir.display()
            );
        } else if code != 0 && self.own {
            // Nothing to resume from.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The job's record, in its checkpoint directory.
const RECORD: &str = "job.json";
/// The lock file of the launcher running the job: its pid.
const LOCK: &str = "launcher.pid";

/// What `--resume` needs to start a job again (a grid job's options have `grid` set).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    /// The launcher's directory (the processes' own).
    pub cwd: PathBuf,
    /// BLAKE3 of the program's file, in hexadecimal.
    pub program_hash: String,
    /// The launcher's options: the program (by its full path), its arguments, -n, -r, -x with
    /// their values, --tag-output, --output-filename...
    pub opts: RunArgs,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The lock of a checkpoint directory, removed when dropped.
pub struct Lock(PathBuf);

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether process `pid` runs and is a launcher (not a pid used again by another program).
fn launcher_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's closing parenthesis; a zombie runs no more.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, None | Some('Z') | Some('X')) {
        return false;
    }
    match std::fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(exe) => exe.file_name().is_some_and(|n| n.to_string_lossy().starts_with("p2pmpi")),
        // Another user's process: assume it is one.
        Err(_) => true,
    }
}

/// `--resume DIR`: the options the job in DIR was started with (run in its directory, which
/// becomes this process's), after checking that its program did not change. `given` are the
/// options of the command (--max-restarts, -v).
pub fn resume(name: &str, dir: &Path, given: &RunArgs) -> Result<RunArgs> {
    if !given.command.is_empty() {
        bail!("--resume takes no program: the job's record in {} names it", dir.display());
    }
    let dir = std::path::absolute(dir).with_context(|| format!("--resume {}", dir.display()))?;
    let path = dir.join(RECORD);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "--resume {}: no job record there ({RECORD}): not the checkpoint directory of a job started with \
             --checkpoint-dir or --max-restarts",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("--resume: cannot read {}", path.display())),
    };
    let rec: JobRecord =
        serde_json::from_slice(&text).with_context(|| format!("--resume: {} is not a job record", path.display()))?;
    let program = PathBuf::from(
        rec.opts.command.first().with_context(|| format!("--resume: {} names no program", path.display()))?,
    );
    let hash = p2pmpi::checkpoint::program_hash_of(&program)
        .with_context(|| format!("--resume: cannot read the job's program {}", program.display()))?;
    if hex(&hash) != rec.program_hash {
        bail!(
            "--resume {}: the program {} changed since the job started (its hash differs): its checkpoints cannot \
             be restored into it",
            dir.display(),
            program.display()
        );
    }
    std::env::set_current_dir(&rec.cwd)
        .with_context(|| format!("--resume: cannot enter the job's directory {}", rec.cwd.display()))?;
    let mut opts = rec.opts;
    if opts.grid && opts.checkpoint_dir.is_none() && opts.checkpoint_copies > 0 {
        bail!(
            "--resume {}: this grid job kept its checkpoints on its peers under a key of its launcher's, which \
             died with it; a grid job that may be resumed keeps them in a directory every peer reaches \
             (--checkpoint-dir)",
            dir.display()
        );
    }
    // A grid job's record says so (`--grid`): it is resumed on the grid.
    opts.local = !opts.grid;
    opts.checkpoint_dir = None;
    opts.resume = Some(dir.clone());
    opts.verbose |= given.verbose;
    if given.max_restarts > 0 {
        opts.max_restarts = given.max_restarts;
    }
    let latest =
        Directory::new(&dir).latest().with_context(|| format!("cannot read the checkpoints in {}", dir.display()))?;
    let from = match &latest {
        Some(m) => format!("from checkpoint generation {} (step {})", m.generation, m.step),
        None => "from the beginning (no complete checkpoint)".to_string(),
    };
    let r = if opts.replicas > 1 { format!(" -r {}", opts.replicas) } else { String::new() };
    eprintln!(
        "{name}: resuming {} (-n {}{r}) {from}; the lines already shown are not shown again",
        opts.command.join(" "),
        opts.n.unwrap_or(0)
    );
    Ok(opts)
}

/// What one run of a job's processes is given.
pub struct Run<'a> {
    pub dir: &'a Path,
    /// The generation to restore (a restart from a checkpoint).
    pub restore: Option<u64>,
    /// A run after the first (its output files are appended to).
    pub again: bool,
    /// The output of the runs before (see [`Replay`]); updated by the run.
    pub replay: &'a mut Replay,
    /// Where the replay is kept on disk (for `--resume`).
    pub journal: Option<std::sync::Arc<crate::output::Journal>>,
}

impl Run<'_> {
    /// The run's output: it goes on from the runs before (their output files appended to).
    pub fn output(&self, layout: p2pmpi_core::replication::Layout, opts: &RunArgs) -> Result<crate::output::Output> {
        let open = if self.again { crate::output::Output::reopen } else { crate::output::Output::create };
        Ok(open(layout, opts.tag_output, opts.output_filename.as_deref())?
            .replaying(layout, self.replay, self.restore)
            .journaled(self.journal.clone()))
    }

    /// The processes' variables: the directory, the marks asked for, the generation.
    pub fn env(&self) -> Vec<(String, String)> {
        use p2pmpi::checkpoint::env;
        let mut v =
            vec![(env::DIR.to_string(), self.dir.display().to_string()), (env::MARKS.to_string(), "1".to_string())];
        if let Some(g) = self.restore {
            v.push((env::RESTORE.to_string(), g.to_string()));
        }
        v
    }
}

/// Whether a run that ended with `code` is started again: it failed, not by the job's
/// `--timeout`, and one of its processes was `killed` by a signal the launcher did not send
/// (a crash, a kill). A program that fails by itself (an error, a panic) would fail again.
pub fn restartable(code: i32, killed: bool) -> bool {
    code != 0 && code != crate::supervise::TIMEOUT_EXIT && killed
}

/// The processes the launcher itself stopped (when it stopped the job), to tell them from
/// those killed by something else.
#[derive(Default)]
pub struct Stopped(std::sync::Mutex<Option<Vec<u32>>>);

impl Stopped {
    /// The job is stopped now: the processes still running are the launcher's to stop.
    pub fn note(&self, children: &std::sync::Mutex<Vec<std::process::Child>>) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if s.is_none() {
            let mut ch = children.lock().unwrap_or_else(|p| p.into_inner());
            *s = Some(ch.iter_mut().filter_map(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id())).collect());
        }
    }

    /// Whether a process (all of them ended) was killed by a signal before the launcher
    /// stopped the job, or without the launcher stopping it.
    pub fn killed_before(&self, children: &std::sync::Mutex<Vec<std::process::Child>>) -> bool {
        use std::os::unix::process::ExitStatusExt;
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut ch = children.lock().unwrap_or_else(|p| p.into_inner());
        ch.iter_mut().any(|c| {
            let by_signal = matches!(c.try_wait(), Ok(Some(st)) if st.signal().is_some());
            by_signal && !s.as_ref().is_some_and(|stopped| stopped.contains(&c.id()))
        })
    }
}

/// Says that the job restarts, why, and from where.
pub fn report(name: &str, cause: Option<&str>, from: Option<&Manifest>, restart: u32, max: u32) {
    let cause = cause.map_or("a process died", |c| c.trim_end_matches("; stopping the other processes"));
    let from = match from {
        Some(m) => format!("from checkpoint generation {} (step {})", m.generation, m.step),
        None => "from the beginning (no complete checkpoint)".to_string(),
    };
    eprintln!("{name}: restart {restart} of {max}: {cause}; restarting every rank {from}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_deaths_by_a_signal_restart() {
        assert!(restartable(137, true));
        assert!(restartable(1, true), "every replica lost, reported by the others");
        assert!(!restartable(0, true));
        assert!(!restartable(1, false));
        assert!(!restartable(101, false));
        assert!(!restartable(crate::supervise::TIMEOUT_EXIT, true));
    }

    #[test]
    fn processes_the_launcher_stopped_are_not_deaths() {
        let spawn = |cmd: &str| std::process::Command::new("sh").args(["-c", cmd]).spawn().unwrap();
        // One killed by someone else, one exiting by itself.
        let killed = std::sync::Mutex::new(vec![spawn("kill -9 $$"), spawn("exit 3")]);
        for c in killed.lock().unwrap().iter_mut() {
            c.wait().unwrap();
        }
        let s = Stopped::default();
        s.note(&killed);
        assert!(s.killed_before(&killed));
        // One the launcher stops (noted while it runs, then killed).
        let ours = std::sync::Mutex::new(vec![spawn("sleep 30")]);
        let s = Stopped::default();
        s.note(&ours);
        for c in ours.lock().unwrap().iter_mut() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert!(!s.killed_before(&ours));
    }

    #[test]
    fn a_restart_names_the_generation() {
        let dir = PathBuf::from("/tmp/x");
        let mut replay = Replay::new(2);
        let run = Run { dir: &dir, restore: Some(3), again: true, replay: &mut replay, journal: None };
        let env = run.env();
        assert!(env.contains(&("P2PMPI_CHECKPOINT_RESTORE".into(), "3".into())));
        assert!(env.contains(&("P2PMPI_CHECKPOINT_DIR".into(), "/tmp/x".into())));
        let fresh = Run { dir: &dir, restore: None, again: false, replay: &mut replay, journal: None };
        assert!(!fresh.env().iter().any(|(k, _)| k == "P2PMPI_CHECKPOINT_RESTORE"));
    }
}
