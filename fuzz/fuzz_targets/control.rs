//! `control::read_msg` on an arbitrary byte stream: records until the end, an error, never a
//! panic; and the launcher's side of a control connection's opening (`control::accept`) fed
//! the same bytes: a refusal or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::{accept, read_msg};
use std::io::{Read, Write};

/// Reads from the input, swallows what is written.
struct Peer<'a>(&'a [u8]);

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::Cursor::new(data);
    while let Ok(Some(_)) = read_msg(&mut r) {}
    let _ = accept(&mut Peer(data), &JobKey::from_bytes([0x5e; 32]), 4);
});
