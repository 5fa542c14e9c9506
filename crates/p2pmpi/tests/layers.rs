//! The MPI library is built in layers (docs/architecture.md, "Layers of the MPI library"): each
//! module uses only modules of its own layer or of the layers below it, and no modules use each
//! other in a circle. This test reads the layer table from that document (it is written there
//! only), reads every module's paths (`crate::…`, `super::…`, child modules) in the crate's
//! sources, and fails on a module that names one above its layer, on a circle, on a module of
//! the transport or the engine that names replication, on a module of the transport that
//! mentions it at all (comments included), and on a `std::process::exit` (or `libc::_exit`)
//! outside the `fatal` module.
//!
//! [`KNOWN`] would list edges that still break the layering, each with its reason; it is empty,
//! and may only stay so: an edge that breaks the layering fails the test.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges (module -> module) that still break the layering or close a circle, and why. May only
/// shrink (it is empty: keep it so).
const KNOWN: &[(&str, &str, &str)] = &[];

/// Modules of the transport and engine layers (this row of the table and those below it) must
/// not name replication: no identifier or path of theirs contains the word (any case), neither
/// the replication layer (`device::replication`) nor the replication core
/// (`p2pmpi_core::replication`). The replication layer wraps the engine through the engine's
/// coordination trait; the engine knows nothing of it.
const ENGINE_ROW: &str = "point-to-point engine";

/// What a module of the transport or the engine must not name.
const FORBIDDEN_WORD: &str = "replication";

/// The row of the transport: its modules must not even mention replication, in code or in
/// comments (a connection knows no master, no replica, no relay; what a replicated job keeps
/// per connection is the replication layer's, by connection id).
const TRANSPORT_ROW: &str = "transport";

/// What a module of the transport must not mention (any case, inside any word: `replica`
/// covers replicas, replicated and replication; `relay` covers `stream_relay`).
const TRANSPORT_FORBIDDEN: &[&str] = &["replica", "relay"];

/// The words of [`TRANSPORT_FORBIDDEN`] that `text` mentions, each with the word it is in.
fn replication_words(text: &str) -> Vec<String> {
    text.split(|c: char| !is_ident(c))
        .filter(|w| TRANSPORT_FORBIDDEN.iter().any(|f| w.to_ascii_lowercase().contains(f)))
        .map(str::to_string)
        .collect()
}

/// Whether `code` has an identifier (a path's segment) containing [`FORBIDDEN_WORD`], in any
/// case.
fn names_replication(code: &str) -> bool {
    code.split(|c: char| !is_ident(c)).any(|w| w.to_ascii_lowercase().contains(FORBIDDEN_WORD))
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer table: (layer name, modules), bottom layer first.
fn layer_table() -> Vec<(String, Vec<String>)> {
    let doc = manifest().join("../../docs/architecture.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let start = text
        .find("## Layers of the MPI library")
        .expect("docs/architecture.md: no section \"## Layers of the MPI library\"");
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text[start..].lines().skip(1) {
        let l = line.trim();
        if l.starts_with('|') {
            in_table = true;
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            if cells.len() < 2 || cells[0] == "layer" || cells[0].starts_with("---") {
                continue;
            }
            let mods: Vec<String> =
                cells[1].split(',').map(|m| m.trim().trim_matches('`').to_string()).filter(|m| !m.is_empty()).collect();
            rows.push((cells[0].to_string(), mods));
        } else if in_table {
            break;
        }
    }
    assert!(rows.len() >= 3, "docs/architecture.md: the layer table has {} rows", rows.len());
    rows
}

/// The code of a file without comments and without `#[cfg(test)]` items.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let code_part = match trimmed.find("//") {
            Some(i) => &trimmed[..i],
            None => trimmed,
        };
        if skip_depth.is_none() && code_part.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        let opens = code_part.matches('{').count();
        let closes = code_part.matches('}').count();
        if pending_cfg_test && skip_depth.is_none() {
            if opens > 0 {
                skip_depth = Some(depth);
                pending_cfg_test = false;
            } else if code_part.trim_end().ends_with(';') {
                // `#[cfg(test)] mod tests;` or a test-only `use`: skipped, nothing to nest.
                pending_cfg_test = false;
                continue;
            }
        }
        depth = depth + opens - closes.min(depth + opens);
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code_part);
        out.push('\n');
    }
    out
}

/// Source files, each with its module path (`device::conn`); files included only under
/// `#[cfg(test)]` are left out.
fn modules() -> Vec<(Vec<String>, PathBuf, String)> {
    let src = manifest().join("src");
    let mut out = Vec::new();
    walk(&src, &src, &mut out);
    let test_only: BTreeSet<Vec<String>> = out
        .iter()
        .flat_map(|(m, _, text): &(Vec<String>, PathBuf, String)| {
            let mut v = Vec::new();
            let mut pending = false;
            for line in text.lines() {
                let t = line.trim();
                if t.starts_with("#[cfg(test)]") {
                    pending = true;
                    continue;
                }
                if pending {
                    if let Some(name) = t.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                        let mut p = m.clone();
                        p.push(name.trim().to_string());
                        v.push(p);
                    }
                }
                pending = false;
            }
            v
        })
        .collect();
    out.into_iter().filter(|(m, _, _)| !test_only.contains(m)).map(|(m, p, t)| (m, p, code(&t))).collect()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(Vec<String>, PathBuf, String)>) {
    for e in std::fs::read_dir(dir).expect("source directory") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            walk(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).expect("under src").with_extension("");
            let mut m: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if m.last().is_some_and(|l| l == "mod" || l == "lib") {
                m.pop();
            }
            let text = std::fs::read_to_string(&p).expect("readable source");
            out.push((m, p, text));
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a path tree at the start of `s` (after `crate::` or `super::`): `a::b::{c, d::e}`.
/// Returns the paths it names and how many bytes it read.
fn path_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] as char).is_whitespace() {
            *i += 1;
        }
    };
    let mut prefix: Vec<String> = Vec::new();
    loop {
        skip_ws(&mut i);
        if i < b.len() && b[i] == b'{' {
            i += 1;
            let mut all = Vec::new();
            loop {
                skip_ws(&mut i);
                if i >= b.len() {
                    return (all, i);
                }
                if b[i] == b'}' {
                    i += 1;
                    return (all, i);
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let (sub, n) = path_tree(&s[i..]);
                if n == 0 {
                    i += 1;
                    continue;
                }
                i += n;
                for p in sub {
                    let mut q = prefix.clone();
                    q.extend(p);
                    all.push(q);
                }
                // `as alias`
                skip_ws(&mut i);
                if s[i..].starts_with("as ") {
                    i += 3;
                    skip_ws(&mut i);
                    while i < b.len() && is_ident(b[i] as char) {
                        i += 1;
                    }
                }
            }
        }
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        if i == start {
            break;
        }
        prefix.push(s[start..i].to_string());
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    (if prefix.is_empty() { vec![] } else { vec![prefix] }, i)
}

/// Every path a file names, absolute (from the crate root): `crate::a::b`, `super::x`, and
/// paths through the file's child modules.
fn named_paths(module: &[String], code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    for (k, &(pos, c)) in chars.iter().enumerate() {
        if !is_ident(c) || (k > 0 && (is_ident(chars[k - 1].1) || chars[k - 1].1 == ':')) {
            continue;
        }
        let rest = &code[pos..];
        let (base, after): (Vec<String>, &str) = if let Some(r) = rest.strip_prefix("crate::") {
            (vec![], r)
        } else if let Some(r) = rest.strip_prefix("super::") {
            (module[..module.len().saturating_sub(1)].to_vec(), r)
        } else if let Some(r) = rest.strip_prefix("self::") {
            (module.to_vec(), r)
        } else {
            let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            let word = &rest[..end];
            if children.contains(word) && rest[end..].starts_with("::") {
                (module.to_vec(), rest)
            } else {
                continue;
            }
        };
        let (paths, _) = path_tree(after);
        for p in paths {
            let mut q = base.clone();
            q.extend(p);
            out.push(q);
        }
    }
    out
}

/// Child modules declared in a file (`mod x;`, `pub(crate) mod x {`).
fn children(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let t = line.trim();
        let t = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
        if let Some(r) = t.strip_prefix("mod ") {
            let name: String = r.chars().take_while(|c| is_ident(*c)).collect();
            out.insert(name);
        }
    }
    out
}

/// Names the crate root re-exports or defines as aliases, with the module they come from.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = lib;
    while let Some(i) = rest.find("pub use crate::") {
        let after = &rest[i + "pub use crate::".len()..];
        let end = after.find(';').unwrap_or(after.len());
        let stmt = &after[..end];
        let module: String = stmt.chars().take_while(|c| is_ident(*c)).collect();
        for item in stmt.split(['{', '}', ',']) {
            let name = item.trim().rsplit(' ').next().unwrap_or("").trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            if !name.is_empty() && name.chars().all(is_ident) {
                out.insert(name.to_string(), module.clone());
            }
        }
        rest = &after[end..];
    }
    for line in lib.lines() {
        if let Some(r) = line.trim().strip_prefix("pub type ") {
            let (name, ty) = r.split_once('=').unwrap_or((r, ""));
            let module: String = ty.trim().chars().take_while(|c| is_ident(*c)).collect();
            if ty.trim()[module.len()..].starts_with("::") {
                out.insert(name.trim().to_string(), module);
            }
        }
    }
    out
}

struct Graph {
    /// node -> layer index (0 = bottom).
    layer_of: BTreeMap<String, usize>,
    layer_names: Vec<String>,
    /// (from, to) -> a file where it occurs.
    edges: BTreeMap<(String, String), String>,
    /// Modules that belong to no layer.
    unplaced: Vec<String>,
    /// Files that name `std::process::exit`.
    exits: Vec<String>,
}

/// The node (a module of the layer table) that module path `m` belongs to: the longest table
/// entry that is a prefix of it.
fn node_of(m: &[String], layer_of: &BTreeMap<String, usize>) -> Option<String> {
    (1..=m.len()).rev().map(|n| m[..n].join("::")).find(|k| layer_of.contains_key(k))
}

fn graph() -> Graph {
    let table = layer_table();
    let mut layer_of = BTreeMap::new();
    for (i, (_, mods)) in table.iter().enumerate() {
        for m in mods {
            assert!(layer_of.insert(m.clone(), i).is_none(), "module {m} is in two layers of the table");
        }
    }
    let layer_names: Vec<String> = table.iter().map(|(n, _)| n.clone()).collect();
    let engine_row = layer_names
        .iter()
        .position(|n| n == ENGINE_ROW)
        .unwrap_or_else(|| panic!("docs/architecture.md: no row \"{ENGINE_ROW}\" in the layer table"));
    let files = modules();
    let lib = files.iter().find(|(m, _, _)| m.is_empty()).map(|(_, _, c)| c.clone()).expect("lib.rs");
    let top: BTreeSet<String> = children(&lib);
    let mut roots = root_names(&lib);
    roots.retain(|_, m| top.contains(m));
    let mut g = Graph { layer_of, layer_names, edges: BTreeMap::new(), unplaced: Vec::new(), exits: Vec::new() };
    for (m, path, code) in &files {
        let file = path.strip_prefix(manifest()).unwrap_or(path).display().to_string();
        if (code.contains("process::exit") || code.contains("libc::_exit")) && m.last().is_none_or(|l| l != "fatal") {
            g.exits.push(file.clone());
        }
        if m.is_empty() {
            // The crate root declares the modules and re-exports the public names.
            continue;
        }
        let Some(from) = node_of(m, &g.layer_of) else {
            g.unplaced.push(m.join("::"));
            continue;
        };
        if g.layer_of[&from] <= engine_row && names_replication(code) {
            g.edges.entry((from.clone(), FORBIDDEN_WORD.to_string())).or_insert_with(|| file.clone());
        }
        for p in named_paths(m, code, &children(code)) {
            let Some(first) = p.first() else { continue };
            let p = if top.contains(first) {
                p
            } else if let Some(owner) = roots.get(first) {
                vec![owner.clone()]
            } else {
                continue;
            };
            let Some(to) = node_of(&p, &g.layer_of) else {
                g.unplaced.push(p.join("::"));
                continue;
            };
            if to != from {
                g.edges.entry((from.clone(), to)).or_insert_with(|| file.clone());
            }
        }
    }
    g.unplaced.sort();
    g.unplaced.dedup();
    g
}

fn known() -> BTreeSet<(String, String)> {
    KNOWN.iter().map(|(a, b, _)| (a.to_string(), b.to_string())).collect()
}

/// The layer of a node; [`FORBIDDEN_WORD`] named by the transport or the engine counts as above
/// every layer.
fn layer(g: &Graph, n: &str) -> usize {
    g.layer_of.get(n).copied().unwrap_or(usize::MAX)
}

#[test]
fn every_module_is_in_a_layer() {
    let g = graph();
    assert!(g.unplaced.is_empty(), "modules in no layer of docs/architecture.md: {:?}", g.unplaced);
}

#[test]
fn no_module_uses_one_above_its_layer() {
    let g = graph();
    let known = known();
    let mut bad = Vec::new();
    for ((a, b), file) in &g.edges {
        if layer(&g, b) > layer(&g, a) && !known.contains(&(a.clone(), b.clone())) {
            let lb = g.layer_names.get(layer(&g, b)).map_or("(named by the transport or the engine)", |s| s);
            bad.push(format!("{a} ({}) -> {b} ({lb}) in {file}", g.layer_names[layer(&g, a)]));
        }
    }
    assert!(bad.is_empty(), "modules using a module above their layer:\n  {}", bad.join("\n  "));
}

#[test]
fn the_known_violations_all_still_occur() {
    let g = graph();
    let gone: Vec<String> = KNOWN
        .iter()
        .filter(|(a, b, _)| !g.edges.contains_key(&(a.to_string(), b.to_string())))
        .map(|(a, b, _)| format!("{a} -> {b}"))
        .collect();
    assert!(gone.is_empty(), "edges listed in KNOWN that no longer occur (remove them): {gone:?}");
}

/// Whether `to` can be reached from `from` along `next`.
fn reaches(next: &BTreeMap<&str, Vec<&str>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from];
    while let Some(n) = todo.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n) {
            todo.extend(next.get(n).into_iter().flatten().copied());
        }
    }
    false
}

#[test]
fn no_modules_use_each_other_in_a_circle() {
    let g = graph();
    let known = known();
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in g.edges.keys() {
        if !known.contains(&(a.clone(), b.clone())) && g.layer_of.contains_key(b) {
            next.entry(a.as_str()).or_default().push(b.as_str());
        }
    }
    // An edge a -> b closes a circle when b reaches a.
    let circles: Vec<String> = next
        .iter()
        .flat_map(|(a, bs)| bs.iter().map(move |b| (*a, *b)))
        .filter(|(a, b)| reaches(&next, b, a))
        .map(|(a, b)| format!("{a} -> {b} (in {})", g.edges[&(a.to_string(), b.to_string())]))
        .collect();
    assert!(circles.is_empty(), "edges on a circle of modules using each other:\n  {}", circles.join("\n  "));
}

#[test]
fn the_circle_finder_finds_circles() {
    let next: BTreeMap<&str, Vec<&str>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])].into();
    assert!(reaches(&next, "b", "a"));
    assert!(!reaches(&next, "a", "d"));
}

#[test]
fn only_the_fatal_module_exits_the_process() {
    let g = graph();
    assert!(g.exits.is_empty(), "files naming process::exit or _exit (go through crate::fatal): {:?}", g.exits);
}

#[test]
fn the_transport_mentions_no_replication() {
    let table = layer_table();
    let layer_of: BTreeMap<String, usize> =
        table.iter().enumerate().flat_map(|(i, (_, mods))| mods.iter().map(move |m| (m.clone(), i))).collect();
    let row = table
        .iter()
        .position(|(n, _)| n == TRANSPORT_ROW)
        .unwrap_or_else(|| panic!("docs/architecture.md: no row \"{TRANSPORT_ROW}\" in the layer table"));
    let src = manifest().join("src");
    let mut files = Vec::new();
    walk(&src, &src, &mut files);
    let mut bad = Vec::new();
    let mut seen = 0;
    for (m, path, text) in &files {
        if node_of(m, &layer_of).is_some_and(|n| layer_of[&n] == row) {
            seen += 1;
            let words = replication_words(text);
            if !words.is_empty() {
                bad.push(format!("{}: {words:?}", path.strip_prefix(manifest()).unwrap_or(path).display()));
            }
        }
    }
    assert!(seen >= 3, "only {seen} files of the transport found");
    assert!(bad.is_empty(), "transport files mentioning replication:\n  {}", bad.join("\n  "));
}

#[test]
fn the_transport_word_finder_finds_replication_words() {
    assert_eq!(replication_words("pub stream_relay: bool, // a Replica's"), ["stream_relay", "Replica"]);
    assert_eq!(replication_words("/// replicated jobs"), ["replicated"]);
    assert!(replication_words("fn flush(&mut self) -> Result<(), ConnError> { rep(); }").is_empty());
}

#[test]
fn the_word_finder_finds_replication_in_any_path() {
    assert!(names_replication("use p2pmpi_core::replication::Layout;"));
    assert!(names_replication("use super::{conn, replication};"));
    assert!(names_replication("fn f(r: &mut super::Replication) {}"));
    assert!(names_replication("let x = crate::device::replication_state;"));
    assert!(!names_replication("let replicas = 2;"));
    assert!(!names_replication("fn frame(e: &mut Core<C, S>) {}"));
}

#[test]
fn the_path_reader_reads_groups_and_relative_paths() {
    let (p, _) = path_tree("{a::b, c::{d, e as f}, g}::x");
    let want: Vec<Vec<String>> = vec![vec!["a", "b"], vec!["c", "d"], vec!["c", "e"], vec!["g"]]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
    assert_eq!(p, want);
    let m = vec!["device".to_string(), "conn".to_string()];
    let kids: BTreeSet<String> = ["replication".to_string()].into();
    let named =
        named_paths(&m, "use super::{Engine, shm::Link}; let x = replication::f(); crate::pool::give(v);", &kids);
    let named: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(named, ["device::Engine", "device::shm::Link", "device::conn::replication::f", "pool::give"]);
    assert_eq!(code("a // crate::x\n#[cfg(test)]\nmod tests;\nb\n#[cfg(test)]\nmod t {\n c\n}\nd"), "a \nb\nd\n");
}
