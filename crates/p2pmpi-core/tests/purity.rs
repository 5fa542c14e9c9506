//! The protocol cores are pure state machines (sans-IO): time comes in as a value and
//! actions go out as values. This test reads the crate's sources and fails on anything that
//! reaches the operating system — sockets, files, threads, processes, the clock, environment
//! variables, standard streams — so that a driver-only call cannot creep into a core.
//! (Addresses are plain values: `core::net`, never `std::net`, whose sockets live beside them.)
#![forbid(unsafe_code)]

mod common;

use common::sources;
use std::path::Path;

/// What a core must not name, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::net", "sockets live there: use core::net for address values"),
    ("TcpStream", "a socket"),
    ("TcpListener", "a socket"),
    ("UdpSocket", "a socket"),
    ("std::fs", "files"),
    ("File::", "files"),
    ("std::thread", "threads"),
    ("std::process", "processes"),
    ("Instant::now", "the clock: time is passed in"),
    ("SystemTime::now", "the clock: time is passed in"),
    ("std::env", "the environment: configuration is passed in"),
    ("println!", "standard output: drivers print"),
    ("eprintln!", "standard error: drivers print"),
    ("std::io::stdin", "standard input"),
];

/// The code of a file without its `#[cfg(test)]` modules (tests may use the clock) and
/// without comments.
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
            }
            pending_cfg_test = false;
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

#[test]
fn the_protocol_cores_reach_no_operating_system_service() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 10, "the cores' sources were found: {files:?}");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        let code = code(&text);
        for (pat, why) in FORBIDDEN {
            if code.contains(pat) {
                found.push(format!("{}: `{pat}` ({why})", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(found.is_empty(), "the protocol cores must stay pure:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_through_comments_and_test_modules_only() {
    let src = "use core::net::SocketAddr;\n// std::thread in a comment\n#[cfg(test)]\nmod tests {\n    fn f() { let _ = std::time::Instant::now(); }\n}\nfn g() { std::thread::sleep(d); }\n";
    let c = code(src);
    assert!(!c.contains("Instant::now"), "{c}");
    assert!(!c.contains("// std::thread"), "{c}");
    assert!(c.contains("std::thread::sleep"), "code after a test module is checked: {c}");
}
