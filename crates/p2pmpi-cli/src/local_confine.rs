//! `p2pmpirun --local --confine`: the processes of a local job confined as a peer daemon
//! confines another member's job ([`p2pmpi_peer::confine`]): Landlock (read the system and
//! the program, read and write only the current directory — the job's directory — and the
//! job's own temporary and shared-memory directories, TCP only to the grid's port range and the
//! launcher's control port), the limits `JOB_*` of the configuration, `no_new_privs`, no core
//! dump, a control group of the job's own where this host gives one. The processes run as the
//! submitter (no per-job user: they write its current directory).

use anyhow::{bail, Context, Result};
use p2pmpi_peer::config::Config;
use p2pmpi_peer::confine::{Confiner, JobCgroup, JobPaths};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The confinement of one local job; its temporary and segment directories are removed when
/// it is dropped.
pub(crate) struct LocalConfinement {
    confiner: Confiner,
    paths: JobPaths,
    ports: String,
    cgroup: Option<JobCgroup>,
}

impl LocalConfinement {
    /// For a job of `procs` processes running `program` (and what it spawns: the programs of
    /// spawned jobs must be readable under the granted paths too).
    pub(crate) fn new(name: &str, cfg: &Config, program: &Path, procs: usize) -> Result<Self> {
        let mut confiner = Confiner::from_config(cfg);
        if let Some(why) = confiner.refusal() {
            bail!("--confine: {why}");
        }
        for what in confiner.unenforced() {
            eprintln!("{name}: --confine: not enforced here: {what}");
        }
        let program = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
        if let Some(dir) = program.parent() {
            confiner.grant_read(dir.to_path_buf());
        }
        let job = format!("local-{:016x}", p2pmpi_peer::home::random_u128() as u64);
        let shm_base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let paths = JobPaths {
            job_dir: std::env::current_dir().context("--confine: no current directory")?,
            tmp: std::env::temp_dir().join(format!("p2pmpi-{job}")),
            shm: shm_base.join(format!("p2pmpi-{job}")),
            connect: Vec::new(),
        };
        for d in [&paths.tmp, &paths.shm] {
            std::fs::create_dir_all(d).with_context(|| format!("--confine: cannot create {}", d.display()))?;
        }
        let cgroup = match confiner.job_cgroup(&job, procs) {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "{name}: --confine: no control group of the job's own ({e}): its processes are counted per user"
                );
                None
            }
        };
        let ports = format!("{}-{}", cfg.min_port, cfg.max_port);
        Ok(LocalConfinement { confiner, paths, ports, cgroup })
    }

    /// Makes `cmd` start confined (its places in its environment: `TMPDIR`, `P2PMPI_SHM_DIR`,
    /// and `P2PMPI_PORTS`, the ports it may listen on), allowed to connect to `control` (its
    /// launcher's control port: the job's, or a spawned job's).
    pub(crate) fn apply(&self, cmd: &mut Command, control: u16) -> Result<()> {
        cmd.env("TMPDIR", &self.paths.tmp).env("P2PMPI_SHM_DIR", &self.paths.shm).env("P2PMPI_PORTS", &self.ports);
        let paths = JobPaths { connect: vec![control], ..self.paths.clone() };
        let ruleset = self.confiner.ruleset(&paths).context("--confine: cannot prepare the confinement")?;
        self.confiner
            .confine_in(cmd, ruleset, self.cgroup.as_ref())
            .context("--confine: cannot enter the job's control group")?;
        Ok(())
    }
}

impl Drop for LocalConfinement {
    fn drop(&mut self) {
        for d in [&self.paths.tmp, &self.paths.shm] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
