//! No module of any crate of the workspace uses another that uses it back, directly or through
//! others: a reader can take the modules of a crate in an order where each one needs only
//! those before it. This test reads every crate's sources, takes each top-level module's paths
//! into its own crate (`crate::NAME`, and `super::NAME` from a module's children), leaving out
//! comments and `#[cfg(test)]` code, and fails on a circle, naming it.
//!
//! The MPI library's finer rules (which layer may use which, the exemptions being worked on)
//! are checked by `crates/p2pmpi/tests/layers.rs`; this test holds every crate to the plain
//! rule, the library's modules at the top level included.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
mod common;

use common::sources;
use std::path::{Path, PathBuf};

/// The code of a file: comment lines dropped, and everything from the first `#[cfg(test)]`
/// on (test modules sit at the end of their files).
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" // ").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The top-level module a source file belongs to (`None` for the crate root and binaries).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
    (first != "lib" && first != "main" && first != "bin").then_some(first)
}

/// Every identifier that follows `prefix` in `code`.
fn names_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        let tail = &rest[i + prefix.len()..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        if before_ok && end > 0 {
            out.push(&tail[..end]);
        }
        rest = &tail[end..];
    }
    out
}

/// Module -> modules it uses, for the crate whose sources are in `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(me) = top_module(src, f) else { continue };
        let text = code(&std::fs::read_to_string(f).expect("source"));
        let mut used: Vec<&str> = names_after(&text, "crate::");
        // `super::NAME` from a file directly under `src/ME/` names a sibling of ME.
        let depth = f.strip_prefix(src).map(|r| r.components().count()).unwrap_or(0);
        let is_mod_file = f.file_name().is_some_and(|n| n == "mod.rs");
        // (From `src/ME/child.rs`, `super::` is ME itself.)
        if depth == 1 || (depth == 2 && is_mod_file) {
            used.extend(names_after(&text, "super::"));
        }
        for u in used {
            if u != me && modules.contains(u) {
                g.entry(me.clone()).or_default().insert(u.to_string());
            }
        }
    }
    g
}

/// The circles of `g` (strongly connected components of more than one module), each sorted.
/// Tarjan's algorithm; recursion is fine for a few dozen modules.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.get(v) {
            for w in ws {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(lw));
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(iw));
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: BTreeSet<&str> = g.keys().map(String::as_str).chain(g.values().flatten().map(String::as_str)).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn workspace_crates() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/")
        .map(|e| e.expect("entry").path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_of_the_workspace_has_a_module_circle() {
    let crates = workspace_crates();
    assert!(crates.len() >= 8, "found only {} crates under crates/", crates.len());
    let mut found = Vec::new();
    for src in &crates {
        for c in circles(&graph(src)) {
            found.push(format!("{}: {}", src.display(), c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "module circles:\n{}", found.join("\n"));
}

#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert!(circles(&g(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")])), vec![vec!["a", "b", "c"]]);
    assert_eq!(names_after("use crate::device::Engine; x.crate::y; my_crate::z", "crate::"), vec!["device", "y"]);
}
