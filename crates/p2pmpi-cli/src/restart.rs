//! A local job restarted from its checkpoints (issue 41): where its checkpoints are kept
//! (`--checkpoint-dir`, else a directory of its own under `./p2pmpi-checkpoints`), what a run
//! of its processes is told ([`Run::env`]), when a failed run is started again
//! (`--max-restarts`: a process killed by a signal), and what the launcher says then.
//!
//! The pieces and manifests are the library's (`p2pmpi::checkpoint::store`); the launcher
//! reads only which generation is the last complete one. The output of the runs is joined by
//! [`crate::output::Replay`].

use crate::options::RunArgs;
use crate::output::Replay;
use anyhow::{Context, Result};
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
    /// succeeded, and named when it failed with checkpoints in it.
    pub fn finish(&self, name: &str, code: i32) {
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
            eprintln!("{name}: the job's checkpoints are kept in {}", self.dir.display());
        }
    }
}

/// What one run of a job's processes is given.
pub struct Run<'a> {
    pub dir: &'a Path,
    /// The generation to restore (a restart from a checkpoint).
    pub restore: Option<u64>,
    /// The output of the runs before (see [`Replay`]); updated by the run.
    pub replay: &'a mut Replay,
}

impl Run<'_> {
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

/// Whether a run that ended with `code` is started again: a process died, killed by a signal
/// (status 128 + signal), and not by the job's `--timeout`. A program that fails by itself
/// (an error, a panic) would fail again.
pub fn restartable(code: i32) -> bool {
    code > 128 && code != crate::supervise::TIMEOUT_EXIT
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
        assert!(restartable(137));
        assert!(restartable(143));
        assert!(!restartable(0));
        assert!(!restartable(1));
        assert!(!restartable(101));
        assert!(!restartable(crate::supervise::TIMEOUT_EXIT));
    }

    #[test]
    fn a_restart_names_the_generation() {
        let dir = PathBuf::from("/tmp/x");
        let mut replay = Replay::new(2);
        let run = Run { dir: &dir, restore: Some(3), replay: &mut replay };
        let env = run.env();
        assert!(env.contains(&("P2PMPI_CHECKPOINT_RESTORE".into(), "3".into())));
        assert!(env.contains(&("P2PMPI_CHECKPOINT_DIR".into(), "/tmp/x".into())));
        let fresh = Run { dir: &dir, restore: None, replay: &mut replay };
        assert!(!fresh.env().iter().any(|(k, _)| k == "P2PMPI_CHECKPOINT_RESTORE"));
    }
}
