//! `control::read_msg` on an arbitrary byte stream: records until the end, an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::control::read_msg;

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::Cursor::new(data);
    while let Ok(Some(_)) = read_msg(&mut r) {}
});
