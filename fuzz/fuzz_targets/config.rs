//! The peer's configuration parser (`Config::parse`) on arbitrary text, and the text it writes
//! back (`to_text`) parsed again: errors and warnings, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_peer::config::Config;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((cfg, _warnings)) = Config::parse(&text, Path::new("fuzz.conf")) {
        let _ = Config::parse(&cfg.to_text(), Path::new("fuzz-again.conf"));
    }
});
