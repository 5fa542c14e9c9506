//! Helpers of the checkpoint tests (`checkpoints.rs`, `resume.rs`): a scratch directory, the
//! local launcher run in it, and readers of `ckpt_iter`'s output and of a checkpoint directory.

use super::launcher;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory of one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `$TMP/p2pmpi-KIND-test-TEST-PID`, empty.
    pub fn new(kind: &str, test: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("p2pmpi-{kind}-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// The checkpoint directory of the test's job.
    pub fn ck(&self) -> PathBuf {
        self.0.join("ck")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `p2pmpirun --local ARGS`, run in `dir`.
pub fn launcher_in(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(launcher());
    c.current_dir(dir).env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests").arg("--local").args(args);
    c
}

/// The lines of `rank` in `stdout`, in order.
pub fn lines_of(stdout: &str, rank: usize) -> Vec<String> {
    let p = format!("rank {rank} ");
    stdout.lines().filter(|l| l.starts_with(&p)).map(str::to_string).collect()
}

/// The job's `checksum …` line.
pub fn checksum(stdout: &str) -> Option<String> {
    stdout.lines().find(|l| l.starts_with("checksum ")).map(str::to_string)
}

/// The last complete generation in `ck` (one with a manifest).
pub fn complete_generation(ck: &Path) -> Option<u64> {
    std::fs::read_dir(ck)
        .ok()?
        .flatten()
        .filter(|e| e.path().join("MANIFEST").exists())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("gen-")?.parse().ok())
        .max()
}
