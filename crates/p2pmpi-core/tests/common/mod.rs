//! Shared by the tests that read the workspace's sources (`circles`, `purity`).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively, appended to `out`.
pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
