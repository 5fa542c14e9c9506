//! `Header::decode` on any 40 bytes, with any eager limit: an error or a header, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::{Header, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN {
        return;
    }
    let mut b = [0u8; HEADER_LEN];
    b.copy_from_slice(&data[..HEADER_LEN]);
    let rest = &data[HEADER_LEN..];
    let max_eager = if rest.len() >= 8 {
        u64::from_le_bytes(rest[..8].try_into().unwrap())
    } else {
        64 << 10
    };
    let _ = Header::decode(&b, max_eager);
});
