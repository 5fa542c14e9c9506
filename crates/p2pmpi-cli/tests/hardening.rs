//! Hardening of the grid's daemons and their files (issue 13), seen from the commands.

mod common;

use common::grid::TestGrid;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

/// `grid.json` and every configuration file of a local grid hold the grid secret: only their
/// owner may read them, and no temporary file is left behind.
#[test]
fn local_grid_files_holding_the_secret_are_private() {
    let g = TestGrid::start("private", 2, &[]);
    let grid = std::fs::read_to_string(g.dir.join("grid.json")).unwrap();
    assert!(grid.contains("\"secret\""), "{grid}");
    for f in [g.dir.join("grid.json"), g.dir.join("supernode/P2P-MPI.conf"), g.conf(1), g.conf(2)] {
        assert_eq!(mode(&f), 0o600, "{} is readable by others", f.display());
    }
    for d in [g.dir.clone(), g.dir.join("supernode"), g.home(1), g.home(2)] {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".tmp"), "temporary file {name} left in {}", d.display());
        }
    }
}
