//! `p2pmpirun --collect PATTERN`: which files of a job directory go back to the submitter.
//!
//! A pattern is a path relative to the job directory whose components may hold `*` (any
//! characters but `/`) and `?` (one character); a component `**` stands for any number of
//! directories. Patterns never leave the job directory: absolute ones and ones with a `..`
//! component are refused ([`check_pattern`]), and the walk ([`find`]) follows no symbolic
//! link. Files that were in the job directory when the processes started and that they left
//! unchanged (the staged program and input files) are not collected.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// At most this many files are collected from one host's job directory.
pub const MAX_FILES: usize = 10_000;

/// Checks a `--collect` pattern: relative, no `..` or empty component, no NUL or backslash.
pub fn check_pattern(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("the pattern is empty".into());
    }
    if p.starts_with('/') {
        return Err(format!(
            "{p:?} is an absolute path: patterns are relative to the job directory and cannot leave it"
        ));
    }
    if p.contains('\0') || p.contains('\\') {
        return Err(format!("{p:?} contains a NUL or a backslash"));
    }
    for part in p.split('/') {
        if part == ".." {
            return Err(format!(
                "{p:?} has a `..` component: files cannot be collected from outside the job directory"
            ));
        }
        if part.is_empty() {
            return Err(format!("{p:?} has an empty component"));
        }
    }
    Ok(())
}

/// Whether one name matches one pattern component (`*`, `?`, literal characters).
fn component_matches(pat: &[char], name: &[char]) -> bool {
    match pat.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|i| component_matches(rest, &name[i..])),
        Some(('?', rest)) => !name.is_empty() && component_matches(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && component_matches(rest, &name[1..]),
    }
}

fn parts_match(pat: &[&str], path: &[&str]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|i| parts_match(rest, &path[i..])),
        Some((p, rest)) => {
            let Some((name, tail)) = path.split_first() else { return false };
            // `*` does not match a leading dot (hidden files), as in a shell.
            if name.starts_with('.') && !p.starts_with('.') {
                return false;
            }
            let pc: Vec<char> = p.chars().collect();
            let nc: Vec<char> = name.chars().collect();
            component_matches(&pc, &nc) && parts_match(rest, tail)
        }
    }
}

/// Whether the relative path `path` (components separated by `/`) matches `pattern`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|p| *p != ".").collect();
    let parts: Vec<&str> = path.split('/').collect();
    parts_match(&pat, &parts)
}

/// What a file was when the processes started: (length, modification time, inode).
pub type Stamp = (u64, Option<SystemTime>, u64);

fn stamp(m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (m.len(), m.modified().ok(), m.ino())
}

/// Every regular file under `dir` (no symbolic link followed), by relative path.
fn walk(dir: &Path) -> Vec<(String, PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if m.is_dir() {
                todo.push((e.path(), r));
            } else if m.is_file() {
                out.push((r, e.path(), m));
                if out.len() > MAX_FILES * 4 {
                    return out;
                }
            }
        }
    }
    out
}

/// The files of `dir` now, to tell later which ones the processes wrote.
pub fn snapshot(dir: &Path) -> HashMap<String, Stamp> {
    walk(dir).into_iter().map(|(r, _, m)| (r, stamp(&m))).collect()
}

/// The files under `dir` that match one of `patterns` and were written or changed since
/// `before` was taken, sorted by name (at most [`MAX_FILES`]). Invalid patterns match nothing.
pub fn find(dir: &Path, patterns: &[String], before: &HashMap<String, Stamp>) -> Vec<(String, PathBuf)> {
    let patterns: Vec<&String> = patterns.iter().filter(|p| check_pattern(p).is_ok()).collect();
    let mut found: Vec<(String, PathBuf)> = walk(dir)
        .into_iter()
        .filter(|(r, _, m)| before.get(r) != Some(&stamp(m)))
        .filter(|(r, _, _)| patterns.iter().any(|p| matches(p, r)))
        .map(|(r, p, _)| (r, p))
        .collect();
    found.sort();
    found.truncate(MAX_FILES);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cannot_leave_the_job_directory() {
        assert!(check_pattern("out.*.txt").is_ok());
        assert!(check_pattern("results/**/*.csv").is_ok());
        assert!(check_pattern("/etc/passwd").is_err());
        assert!(check_pattern("../secret").is_err());
        assert!(check_pattern("a/../../b").is_err());
        assert!(check_pattern("").is_err());
        assert!(check_pattern("a//b").is_err());
    }

    #[test]
    fn globs_match_within_a_component_and_double_star_across() {
        assert!(matches("out.*.txt", "out.3.txt"));
        assert!(!matches("out.*.txt", "sub/out.3.txt"));
        assert!(matches("*", "result"));
        assert!(!matches("*", "dir/result"));
        assert!(!matches("*", ".hidden"));
        assert!(matches("r?.dat", "r1.dat"));
        assert!(!matches("r?.dat", "r12.dat"));
        assert!(matches("**/*.csv", "a.csv"));
        assert!(matches("**/*.csv", "x/y/a.csv"));
        assert!(matches("res/**", "res/a/b"));
        assert!(matches("./out.txt", "out.txt"));
    }

    #[test]
    fn only_files_written_since_the_snapshot_are_found() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-collect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("staged.txt"), "input").unwrap();
        let before = snapshot(&dir);
        std::fs::write(dir.join("out.txt"), "new").unwrap();
        std::fs::write(dir.join("sub/deep.txt"), "deep").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link.txt")).unwrap();
        let all = vec!["**/*.txt".to_string()];
        let names: Vec<String> = find(&dir, &all, &before).into_iter().map(|(r, _)| r).collect();
        assert_eq!(names, vec!["out.txt".to_string(), "sub/deep.txt".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
